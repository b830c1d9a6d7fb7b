// `npm run cluster:up`: a local control plane, the CRDs, a real node (Kubernetes' own kubelet with
// containerd, which needs Linux and root) and the controller.
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
// (or PLAYBOOK_NO_INSTALL=1) stops at a missing package instead of installing it with apt-get;
// --no-image-build stops when the runner image is missing or stale instead of building it (as
// `npm run image:build` does; PLAYBOOK_IMAGE_TAG names another tag than the version).
// --node real, the only node there is now, is still taken, so that older commands work.
// --with-kueue starts Kueue beside the API server (its CRDs, its webhooks on loopback, pod
// integration on), for Playbooks with a queueName.
// --with-object-store starts SeaweedFS's S3 server (the log archive's store, docs/log-archive.md),
// makes its bucket and the credentials Secret, and turns the controller's archive on with it.
const Flags = z.object({
  noController: z.boolean(),
  noInstall: z.boolean(),
  noImageBuild: z.boolean(),
  withKueue: z.boolean(),
  withObjectStore: z.boolean(),
  node: z.literal("real", {
    error: (i) =>
      i.input === "process"
        ? "--node process is gone: the process node was retired, and cluster:up runs Kubernetes' own kubelet with containerd (leave --node out)"
        : `--node takes only real (the default), not ${String(i.input)}`,
  }),
});
function parseFlags(args: string[]) {
  const flags = {
    noController: false,
    noInstall: false,
    noImageBuild: false,
    withKueue: false,
    withObjectStore: false,
    node: "real" as string,
  };
  for (let i = 0; i < args.length; i += 1) {
    const arg = args[i] ?? "";
    if (arg === "--no-controller") flags.noController = true;
    else if (arg === "--no-install") flags.noInstall = true;
    else if (arg === "--no-image-build") flags.noImageBuild = true;
    else if (arg === "--with-kueue") flags.withKueue = true;
    else if (arg === "--with-object-store") flags.withObjectStore = true;
    else if (arg === "--node") flags.node = args[++i] ?? "";
    else if (arg.startsWith("--node=")) flags.node = arg.slice("--node=".length);
    else
      return {
        success: false as const,
        message: `unknown flag ${arg} (only --no-controller, --no-install, --no-image-build, --with-kueue and --with-object-store)`,
      };
  }
  const parsed = Flags.safeParse(flags);
  return parsed.success
    ? { success: true as const, data: parsed.data }
    : { success: false as const, message: parsed.error.issues.map((issue) => issue.message).join("; ") };
}
const flags = parseFlags(process.argv.slice(2));
if (!flags.success) {
  log(flags.message);
  process.exit(2);
}
const startController = !flags.data.noController;
const install = !flags.data.noInstall && !installForbiddenByEnv();
const node = flags.data.node;

const stateDir = path.resolve(process.env.CLUSTER_STATE_DIR ?? path.join(repoRoot(), ".cluster"));
const t0 = Date.now();
try {
  const cluster = await startDevCluster({
    stateDir,
    daemon: true,
    startController,
    install,
    log,
    node,
    // The real node's runner image, before anything starts: built when missing or stale, else a
    // stop naming `npm run image:build`.
    runnerImage: { build: !flags.data.noImageBuild },
    kueue: flags.data.withKueue,
    objectStore: flags.data.withObjectStore,
  });
  log(`Cluster up in ${((Date.now() - t0) / 1000).toFixed(1)}s; logs in ${path.join(stateDir, "logs")}`);
  log(`kubectl, helm and the control-plane binaries are in ${cluster.state.binDir}`);
  if (cluster.realNode)
    log(
      `Real node ${cluster.realNode.name} (containerd ${cluster.realNode.containerdSocket}) has ${cluster.realNode.images.join(", ")}`,
    );
  if (cluster.kueue)
    log(
      `Kueue ${cluster.kueue.version} (log ${cluster.kueue.logFile}): make a ResourceFlavor, a ClusterQueue and a LocalQueue, then label pods kueue.x-k8s.io/queue-name`,
    );
  if (cluster.objectStore)
    log(
      `Log archive store (SeaweedFS S3) at ${cluster.objectStore.endpoint}, bucket ${cluster.objectStore.bucket}, path-style; its keys in Secret playbook-system/playbook-log-archive (log ${cluster.objectStore.logFile})`,
    );
  if (cluster.objectStorePodEndpoint)
    log(`The store for the real node's pods: ${cluster.objectStorePodEndpoint} (--log-archive-pod-endpoint)`);
  if (cluster.controllerUrl)
    log(
      `Controller metrics: ${cluster.controllerUrl}/metrics (health ${cluster.controllerUrl}/healthz, readiness ${cluster.controllerUrl}/readyz)`,
    );
  if (!startController)
    log("The controller was left out: run it with `npx playbook controller` (KUBECONFIG below)");
  log("Stop it all with: npm run cluster:down");
  process.stdout.write(`export KUBECONFIG=${cluster.state.kubeconfig}\n`);
} catch (error) {
  if (error instanceof MissingPrerequisiteError) for (const line of error.message.split("\n")) log(line);
  else log(`failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
}
