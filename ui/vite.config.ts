// Builds the one ES module Airflow's UI imports for the "Stream replication"
// react_apps entry. React, ReactDOM, the JSX runtime, Chakra UI and Emotion are
// NOT bundled: Airflow sets them on globalThis before it loads a plugin, and a
// second React copy would break hooks (and a second Chakra would lose the theme).
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { defineConfig, transformWithEsbuild, type Plugin } from "vite";

const require = createRequire(import.meta.url);

// import specifier -> the global Airflow's index.js sets for it
const GLOBALS: Record<string, string> = {
  react: "React",
  "react-dom": "ReactDOM",
  "react/jsx-runtime": "ReactJSXRuntime",
  "@chakra-ui/react": "ChakraUI",
  "@emotion/react": "EmotionReact",
};

// Each specifier becomes a virtual module re-exporting the global's members.
// The export names come from the installed package (same major as Airflow's),
// so named imports (ESM) and require() (CJS deps such as zustand's shim) both
// resolve to the one instance Airflow already runs.
function airflowGlobals(): Plugin {
  const PREFIX = "\0airflow-global:";
  return {
    name: "airflow-globals",
    enforce: "pre",
    resolveId(id) {
      return id in GLOBALS ? PREFIX + id : null;
    },
    load(id) {
      if (!id.startsWith(PREFIX)) return null;
      const spec = id.slice(PREFIX.length);
      const names = Object.keys(require(spec)).filter(
        (k) => k !== "default" && k !== "__esModule" && /^[A-Za-z_$][\w$]*$/.test(k),
      );
      return [
        `const m = globalThis[${JSON.stringify(GLOBALS[spec])}];`,
        `if (!m) throw new Error("streamrep: globalThis.${GLOBALS[spec]} is not set (not inside Airflow's UI?)");`,
        `export default m;`,
        `export const { ${names.join(", ")} } = m;`,
      ].join("\n");
    },
  };
}

// Vite leaves whitespace in ES-format library builds; squeeze the final chunk.
function minifyChunk(): Plugin {
  return {
    name: "minify-es-chunk",
    apply: "build",
    // generateBundle: after Vite's own renderChunk pass, which re-adds whitespace
    async generateBundle(_options, bundle) {
      for (const chunk of Object.values(bundle)) {
        if (chunk.type !== "chunk") continue;
        const out = await transformWithEsbuild(chunk.code, chunk.fileName, {
          minify: true,
          format: "esm",
          target: "es2022",
          legalComments: "none",
        });
        chunk.code = out.code;
      }
    },
  };
}

export default defineConfig({
  plugins: [airflowGlobals(), minifyChunk()],
  esbuild: { jsx: "automatic", legalComments: "none" },
  define: { "process.env.NODE_ENV": JSON.stringify("production") },
  build: {
    outDir: fileURLToPath(new URL("../plugins/streamrep/airflow/static", import.meta.url)),
    emptyOutDir: false, // icon.svg lives there too
    target: "es2022",
    minify: true,
    sourcemap: false,
    cssCodeSplit: false,
    lib: {
      entry: fileURLToPath(new URL("src/main.ts", import.meta.url)),
      formats: ["es"],
      fileName: () => "replication.js",
    },
    rollupOptions: {
      output: { inlineDynamicImports: true },
      // React Flow's "use client" means nothing outside a server-components build
      onwarn(warning, warn) {
        if (warning.code !== "MODULE_LEVEL_DIRECTIVE") warn(warning);
      },
      // Reading a member of a global namespace has no side effect; without this
      // every unused Chakra name would be kept as a destructured binding.
      treeshake: { propertyReadSideEffects: false },
    },
  },
});
