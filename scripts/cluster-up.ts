// `npm run cluster:up`: a local control plane, the CRDs, the process node and the controller.
// Progress goes to stderr; stdout carries only the `export KUBECONFIG=…` line, so
// `eval "$(npm run --silent cluster:up)"` works.
import path from "node:path";
import { z } from "zod";
import { repoRoot } from "../test/harness/binaries.js";
import { startDevCluster } from "../test/harness/dev-cluster.js";
import { installForbiddenByEnv, MissingPrerequisiteError } from "../test/harness/prerequisites.js";

const log = (message: string): void => {
  process.stderr.write(`cluster:up: ${message}\n`);
};

// --no-controller leaves the controller out, for `npx playbook controller` by hand; --no-install
// (or CLUSTER_NO_INSTALL=1) stops at a missing package instead of installing it with apt-get.
const Flags = z.array(
  z.enum(["--no-controller", "--no-install"], {
    error: (i) => `unknown flag ${String(i.input)} (only --no-controller and --no-install)`,
  }),
);
const flags = Flags.safeParse(process.argv.slice(2));
if (!flags.success) {
  log(flags.error.issues.map((issue) => issue.message).join("; "));
  process.exit(2);
}
const startController = !flags.data.includes("--no-controller");
const install = !flags.data.includes("--no-install") && !installForbiddenByEnv();

const stateDir = path.resolve(process.env.CLUSTER_STATE_DIR ?? path.join(repoRoot(), ".cluster"));
const t0 = Date.now();
try {
  const cluster = await startDevCluster({ stateDir, daemon: true, startController, install, log });
  log(`Cluster up in ${((Date.now() - t0) / 1000).toFixed(1)}s; logs in ${path.join(stateDir, "logs")}`);
  log(`kubectl, helm and the control-plane binaries are in ${cluster.state.binDir}`);
  log(`Lose a pod as on node failure: curl -X POST ${cluster.processNodeUrl}/lose/NAMESPACE/NAME`);
  if (!startController)
    log("The controller was left out: run it with `npx playbook controller` (KUBECONFIG below)");
  log("Stop it all with: npm run cluster:down");
  process.stdout.write(`export KUBECONFIG=${cluster.state.kubeconfig}\n`);
} catch (error) {
  if (error instanceof MissingPrerequisiteError) for (const line of error.message.split("\n")) log(line);
  else log(`failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
}
