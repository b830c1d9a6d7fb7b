// The bench's node, as a process of its own beside the control plane: the scripted node (a Ready
// Node no kubelet runs, test/harness/scripted-node.ts) and its autopilot (autopilot.ts), which
// gives every pod bound to it the life its workload names. Apart from the benchmark's process, so
// that its work never delays the observer's timestamps. Writes --ready-file once it takes pods;
// stops on SIGTERM or SIGINT.
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { KubeConfig } from "@kubernetes/client-node";
import { ScriptedNode } from "../harness/scripted-node.js";
import { Autopilot } from "./autopilot.js";
import { taskMs } from "./workloads.js";

const { values } = parseArgs({
  options: { kubeconfig: { type: "string" }, "ready-file": { type: "string" } },
});
if (!values.kubeconfig || !values["ready-file"]) {
  process.stderr.write("usage: bench-node --kubeconfig FILE --ready-file FILE\n");
  process.exit(2);
}
const log = (message: string) => process.stderr.write(`${new Date().toISOString()} ${message}\n`);
const kubeConfig = new KubeConfig();
kubeConfig.loadFromFile(values.kubeconfig);
const node = new ScriptedNode(kubeConfig, log);
await node.start();
const autopilot = new Autopilot(kubeConfig, node.nodeName, taskMs, log);
await autopilot.start();
writeFileSync(values["ready-file"], `${node.nodeName}\n`);
log(`Bench node ${node.nodeName} ready: the autopilot runs its pods`);

const stop = () => {
  autopilot.stop();
  void node.stop().finally(() => process.exit(0));
};
process.once("SIGTERM", stop);
process.once("SIGINT", stop);
