// Stands in for Airflow's UI: same globals, a ChakraProvider, then the built bundle.
import * as Chakra from "@chakra-ui/react";
import * as Emotion from "@emotion/react";
import * as React from "react";
import * as ReactDOM from "react-dom";
import { createRoot } from "react-dom/client";
import * as ReactJSXRuntime from "react/jsx-runtime";

Object.assign(globalThis, {
  React,
  ReactDOM,
  ReactJSXRuntime,
  ChakraUI: Chakra,
  ChakraUISystem: Chakra.defaultSystem,
  EmotionReact: Emotion,
});

const q = new URLSearchParams(location.search);
const html = document.documentElement;
html.style.colorScheme = html.classList.contains("dark") ? "dark" : "light";
if (q.get("toggle")) {
  // flip the colour mode later, as Airflow's theme switch does
  setTimeout(() => {
    const dark = !html.classList.contains("dark");
    html.classList.toggle("dark", dark);
    html.classList.toggle("light", !dark);
    html.style.colorScheme = dark ? "dark" : "light";
  }, Number(q.get("toggle")));
}

await import(/* @vite-ignore */ `${location.origin}/static/replication.js`);
const Page = (globalThis as unknown as { AirflowPlugin: React.ComponentType }).AirflowPlugin;

createRoot(document.getElementById("root")!).render(
  <Chakra.ChakraProvider value={Chakra.defaultSystem}>
    <Chakra.Box p={6} minH="100vh" bg="bg" color="fg">
      <Page />
    </Chakra.Box>
  </Chakra.ChakraProvider>,
);
