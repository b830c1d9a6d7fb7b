// `npm run cluster:down`: stops what `cluster:up` started and checks nothing is left listening.
import path from "node:path";
import { repoRoot } from "../test/harness/binaries.js";
import { stopDevCluster } from "../test/harness/dev-cluster.js";

const log = (message: string): void => {
  process.stderr.write(`cluster:down: ${message}\n`);
};

const stateDir = path.resolve(process.env.CLUSTER_STATE_DIR ?? path.join(repoRoot(), ".cluster"));
try {
  if (await stopDevCluster(stateDir, log)) log("Cluster stopped; no recorded process or port is left");
  else log(`No cluster recorded in ${stateDir}`);
} catch (error) {
  log(`failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
}
