// `npm run cluster:up`: a local control plane, the CRDs, the process node and the controller.
// Progress goes to stderr; stdout carries only the `export KUBECONFIG=…` line, so
// `eval "$(npm run --silent cluster:up)"` works.
import path from "node:path";
import { z } from "zod";
import { repoRoot } from "../test/harness/binaries.js";
import { startDevCluster } from "../test/harness/dev-cluster.js";

const log = (message: string): void => {
  process.stderr.write(`cluster:up: ${message}\n`);
};

// The only flag: --no-controller leaves the controller out, for `npx playbook controller` by hand.
const Flags = z.array(
  z.literal("--no-controller", { error: (i) => `unknown flag ${String(i.input)} (only --no-controller)` }),
);
const flags = Flags.safeParse(process.argv.slice(2));
if (!flags.success) {
  log(flags.error.issues.map((issue) => issue.message).join("; "));
  process.exit(2);
}
const startController = !flags.data.includes("--no-controller");

const stateDir = path.resolve(process.env.CLUSTER_STATE_DIR ?? path.join(repoRoot(), ".cluster"));
const t0 = Date.now();
try {
  const cluster = await startDevCluster({ stateDir, daemon: true, startController, log });
  log(`Cluster up in ${((Date.now() - t0) / 1000).toFixed(1)}s; logs in ${path.join(stateDir, "logs")}`);
  log(`kubectl, helm and the control-plane binaries are in ${cluster.state.binDir}`);
  log(`Lose a pod as on node failure: curl -X POST ${cluster.processNodeUrl}/lose/NAMESPACE/NAME`);
  if (!startController)
    log("The controller was left out: run it with `npx playbook controller` (KUBECONFIG below)");
  log("Stop it all with: npm run cluster:down");
  process.stdout.write(`export KUBECONFIG=${cluster.state.kubeconfig}\n`);
} catch (error) {
  log(`failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
}
