// Entry of the bundle Airflow's UI imports for the "Stream replication" page.
// React Flow's stylesheet travels inside the module: a plugin gets no <link>.
import xyflowCss from "@xyflow/react/dist/style.css?inline";
import { ReplicationPage } from "./Page";

const STYLE_ID = "streamrep-xyflow-css";
if (!document.getElementById(STYLE_ID)) {
  const style = document.createElement("style");
  style.id = STYLE_ID;
  style.textContent = xyflowCss;
  document.head.appendChild(style);
}

(globalThis as { AirflowPlugin?: unknown }).AirflowPlugin = ReplicationPage;
export default ReplicationPage;
