// Dev harness: a page that sets the same globals Airflow's UI sets, then
// imports the BUILT bundle exactly as Airflow does. Fixture API under
// /s/<scenario>/streamrep/api/... (the harness sets <base href="/s/<scenario>/">).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";
import { answer } from "./dev/fixtures";

const bundle = fileURLToPath(new URL("../plugins/streamrep/airflow/static/replication.js", import.meta.url));

export default defineConfig({
  root: fileURLToPath(new URL("dev", import.meta.url)),
  esbuild: { jsx: "automatic" },
  server: { host: "127.0.0.1" },
  // fixed list: no re-optimising (and 504s) when a fixture file changes
  optimizeDeps: {
    include: ["react", "react-dom", "react-dom/client", "react/jsx-runtime", "@chakra-ui/react", "@emotion/react"],
  },
  plugins: [
    {
      name: "streamrep-fixtures",
      configureServer(server) {
        server.middlewares.use((req, res, next) => {
          const url = new URL(req.url ?? "/", "http://x");
          if (url.pathname === "/static/replication.js") {
            res.setHeader("Content-Type", "text/javascript");
            res.end(readFileSync(bundle));
            return;
          }
          const m = /^\/s\/([^/]+)\/(streamrep\/api\/.*)$/.exec(url.pathname);
          if (!m) return next();
          const a = answer(m[1], req.method ?? "GET", m[2]);
          setTimeout(() => {
            res.statusCode = a.status;
            res.setHeader("Content-Type", "application/json");
            res.end(JSON.stringify(a.body));
          }, a.delay ?? 50);
        });
      },
    },
  ],
});
