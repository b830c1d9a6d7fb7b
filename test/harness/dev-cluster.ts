import { execFile } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { mkdir, readFile, rm } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";
import { KubeConfig } from "@kubernetes/client-node";
import { loadKubeConfig, makeClients } from "../../src/runtime/kube-config.js";
import { repoRoot, toolsBinDir } from "./binaries.js";
import { type ClusterState, readClusterState, startControlPlane, stopCluster } from "./control-plane.js";
import { type Kueue, startKueue } from "./kueue.js";
import { APISERVICE_NAME, logApiEndpoint, logApiServingCertificate, registerLogApi } from "./log-api.js";
import { type ObjectStore, startObjectStore } from "./object-store.js";
import {
  ensurePrerequisites,
  installForbiddenByEnv,
  MissingPrerequisiteError,
  REAL_NODE_PREREQUISITES,
  realNodeHostProblem,
} from "./prerequisites.js";
import { freePort, isRunning, logTail, type RecordedProcess, startProcess, waitFor } from "./processes.js";
import { projectImageArchive, projectImageName } from "./real-node/images.js";
import {
  killRealNodeSync,
  NODE_API_ADDRESS,
  type RealNode,
  realNodeEgressSocket,
  startRealNode,
  stopRealNode,
} from "./real-node/real-node.js";
import { publishStoreOnNode } from "./real-node/store-on-node.js";
import { ensureRunnerImage } from "./runner-image.js";
import { ScriptedNode } from "./scripted-node.js";

const run = promisify(execFile);

/**
 * Which node the pods go to: containerd with Kubernetes' own kubelet (`cluster:up`, the real-node
 * tests), or the scripted node (no kubelet: the cluster tests write their pods' status).
 */
export type NodeKind = "scripted" | "real";

export interface DevCluster {
  state: ClusterState;
  nodeKind: NodeKind;
  /** Kueue, when `kueue: true`. */
  kueue?: Kueue;
  /** The real node, when `node: "real"`. */
  realNode?: RealNode;
  /** SeaweedFS's S3 server, the log archive's store, when `objectStore: true`. */
  objectStore?: ObjectStore;
  /**
   * The store as the real node's pods reach it (http://NODE_API_ADDRESS:PORT, store-on-node.ts),
   * when `objectStore: true` and `node: "real"`: the controller's --log-archive-pod-endpoint.
   */
  objectStorePodEndpoint?: string;
  /** Where the controller serves /metrics, /healthz and /readyz (http://127.0.0.1:PORT), when started. */
  controllerUrl?: string;
  /** The scripted node, when `node: "scripted"`. */
  scriptedNode?: ScriptedNode;
  stop(): Promise<void>;
}

export interface DevClusterOptions {
  stateDir: string;
  /** Processes outlive this one (`cluster:up`, a real node only). */
  daemon: boolean;
  /** Start `playbook controller` from this checkout's build when it exists. */
  startController?: boolean;
  /**
   * May install missing Debian packages (containerd...) with apt-get when running as root;
   * default: yes unless PLAYBOOK_NO_INSTALL (or the deprecated CLUSTER_NO_INSTALL) declines.
   */
  install?: boolean;
  log: (message: string) => void;
  /** Default "real". */
  node?: NodeKind;
  /** OCI image archives the real node imports besides its pause and busybox images. */
  images?: string[];
  /**
   * Check the runner image before anything starts (`cluster:up`, a real node without `images`):
   * build it when missing or stale (build), else stop naming `npm run image:build`.
   */
  runnerImage?: { build: boolean };
  /** Start Kueue beside the API server, with its defaults and pod integration (kueue.ts). */
  kueue?: boolean;
  /**
   * Start SeaweedFS's S3 server (object-store.ts) with its bucket and the credentials Secret the
   * chart's logArchive.credentialsSecret names, and turn the controller's log archive on with it.
   */
  objectStore?: boolean;
}

/** The namespace and name of the dev cluster's archive credentials, as the chart's defaults name them. */
export const DEV_ARCHIVE_SECRET = { namespace: "playbook-system", name: "playbook-log-archive" };

/**
 * The flags and env that turn the dev controller's log archive on against the dev store; with
 * `podEndpoint`, where the real node's pods reach it (storeOnNode), the runner's uploads go there.
 */
export function devArchiveSettings(
  store: ObjectStore,
  podEndpoint?: string,
): { args: string[]; env: Record<string, string> } {
  return {
    args: [
      `--log-archive-bucket=${store.bucket}`,
      `--log-archive-endpoint=${store.endpoint}`,
      // The runner uploads where the node's pods reach the store; else the controller follows.
      ...(podEndpoint ? [`--log-archive-pod-endpoint=${podEndpoint}`] : ["--log-archive-upload=follow"]),
      `--log-archive-region=${store.region}`,
      "--log-archive-force-path-style",
    ],
    env: { AWS_ACCESS_KEY_ID: store.accessKeyId, AWS_SECRET_ACCESS_KEY: store.secretAccessKey },
  };
}

/**
 * The dev controller's log API (test/harness/log-api.ts): where it listens, its certificate, and
 * what registers its APIService once it serves, so that `playbook logs` reads the archive.
 */
async function devLogApi(
  stateDir: string,
  options: { daemon: boolean; record: (process: RecordedProcess) => Promise<void> },
): Promise<{ args: string[]; register: (kubeconfig: string) => Promise<void> }> {
  const port = await freePort();
  const dir = path.join(stateDir, "log-api");
  await mkdir(dir, { recursive: true });
  const { namespace } = DEV_ARCHIVE_SECRET;
  const serving = await logApiServingCertificate(dir, namespace);
  const endpoint = await logApiEndpoint(stateDir, port, options);
  return {
    args: [
      `--log-api-address=${endpoint.listen}:${port}`,
      `--log-api-cert-file=${serving.certFile}`,
      `--log-api-key-file=${serving.keyFile}`,
    ],
    register: async (kubeconfig) => {
      const { api } = makeClients(loadKubeConfig(kubeconfig));
      await registerLogApi(api, {
        namespace,
        address: endpoint.endpoint,
        port,
        caBundle: await readFile(serving.caFile),
      });
    },
  };
}

/** The store's keys as the Secret the chart's controller reads them from (kubectl apply'd). */
async function applyArchiveSecret(binDir: string, kubeconfig: string, store: ObjectStore): Promise<void> {
  const kubectl = path.join(binDir, "kubectl");
  const env = { ...process.env, KUBECONFIG: kubeconfig };
  const { namespace, name } = DEV_ARCHIVE_SECRET;
  const objects = {
    apiVersion: "v1",
    kind: "List",
    items: [
      { apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } },
      {
        apiVersion: "v1",
        kind: "Secret",
        metadata: { name, namespace },
        type: "Opaque",
        stringData: { AWS_ACCESS_KEY_ID: store.accessKeyId, AWS_SECRET_ACCESS_KEY: store.secretAccessKey },
      },
    ],
  };
  const child = execFile(kubectl, ["apply", "-f", "-"], { env });
  child.stdin?.end(JSON.stringify(objects));
  await new Promise<void>((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (code) =>
      code === 0 ? resolve() : reject(new Error(`kubectl apply of the archive Secret exited ${code}`)),
    );
  });
}

async function installCrds(binDir: string, kubeconfig: string, log: (message: string) => void) {
  const crdDir = path.join(repoRoot(), "crds");
  if (!existsSync(crdDir) || !readdirSync(crdDir).some((f) => /\.ya?ml$/.test(f))) return;
  const kubectl = path.join(binDir, "kubectl");
  const env = { ...process.env, KUBECONFIG: kubeconfig };
  await run(kubectl, ["apply", "--server-side", "-f", crdDir], { env });
  await run(kubectl, ["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"], { env });
  log(`Installed CRDs from ${crdDir}`);
}

/**
 * The dev cluster's controller command line. With Kueue running, the controller watches its
 * Workloads (`--kueue`), so a queued run carries Kueue's words as docs/kueue.md says.
 */
export function devControllerArgs(options: { cli: string; metricsPort: number; kueue: boolean }): string[] {
  return [
    options.cli,
    "controller",
    "--metrics-address",
    `127.0.0.1:${options.metricsPort}`,
    ...(options.kueue ? ["--kueue"] : []),
  ];
}

/**
 * The control plane, the CRDs, a node and (optionally) the controller: what `npm run cluster:up`
 * (a real node, as daemons) and the tests' global setups start.
 */
export async function startDevCluster(options: DevClusterOptions): Promise<DevCluster> {
  const { log } = options;
  const nodeKind = options.node ?? "real";
  // A real node needs Linux and root: said before anything is checked, installed or started.
  const hostProblem = nodeKind === "real" ? realNodeHostProblem() : undefined;
  if (hostProblem) throw new MissingPrerequisiteError(hostProblem);
  // Everything this machine must provide is checked (and Go fetched) before anything starts.
  ensurePrerequisites({
    install: options.install ?? !installForbiddenByEnv(),
    log,
    // The scripted node needs nothing but the control plane's binaries (tools/build.sh, next).
    prerequisites: nodeKind === "real" ? REAL_NODE_PREREQUISITES : [],
  });
  if (nodeKind === "real" && options.runnerImage && !options.images)
    await ensureRunnerImage({
      build: options.runnerImage.build,
      install: options.install ?? !installForbiddenByEnv(),
      log,
    });
  // The scripted node's tests wait on no kubelet or containerd build.
  const binDir = await toolsBinDir(nodeKind === "real" ? "all" : "control-plane");
  // A real node left by a killed run in this folder holds namespaces, cgroups and sysctls.
  await stopRealNodeIn(options.stateDir, log);
  const controlPlane = await startControlPlane({
    stateDir: options.stateDir,
    binDir,
    daemon: options.daemon,
    log,
    // The `kubernetes` Service's endpoint: where the real node's pods reach the API server.
    // Its connections to the kubelet, pods and Services: from the node's namespace, not this one.
    ...(nodeKind === "real"
      ? { advertiseAddress: NODE_API_ADDRESS, clusterEgressSocket: realNodeEgressSocket(options.stateDir) }
      : {}),
  });
  const { state } = controlPlane;
  let scriptedNode: ScriptedNode | undefined;
  try {
    await installCrds(binDir, state.kubeconfig, log);
    let realNode: RealNode | undefined;
    if (nodeKind === "scripted") {
      if (options.daemon)
        throw new Error("the scripted node runs only inside a test run (its tests write pod status)");
      const kubeConfig = new KubeConfig();
      kubeConfig.loadFromFile(state.kubeconfig);
      scriptedNode = new ScriptedNode(kubeConfig, log);
      await scriptedNode.start();
    } else if (nodeKind === "real") {
      const pki = path.join(state.stateDir, "pki");
      realNode = await startRealNode({
        stateDir: state.stateDir,
        binDir,
        server: state.server,
        caFile: path.join(pki, "ca.crt"),
        node: { certFile: path.join(pki, "node.crt"), keyFile: path.join(pki, "node.key") },
        adminKubeconfig: state.kubeconfig,
        daemon: options.daemon,
        extraImages:
          options.images ?? [await projectImageArchive(log)].filter((a): a is string => a !== undefined),
        record: (process, port) => controlPlane.record(process, port),
        log,
      });
    }

    // After the node: the API server dials Kueue's webhooks from the node's network namespace.
    const kueue = options.kueue
      ? await startKueue({
          binDir,
          kubeconfig: state.kubeconfig,
          stateDir: state.stateDir,
          log,
          daemon: options.daemon,
          record: (process, port) => controlPlane.record(process, port),
        })
      : undefined;

    const objectStore = options.objectStore
      ? await startObjectStore({
          binDir,
          stateDir: state.stateDir,
          daemon: options.daemon,
          log,
          record: (process) => controlPlane.record(process),
        })
      : undefined;
    if (objectStore) {
      await applyArchiveSecret(binDir, state.kubeconfig, objectStore);
      log(`Made Secret ${DEV_ARCHIVE_SECRET.namespace}/${DEV_ARCHIVE_SECRET.name} with the store's keys`);
    }
    // Recorded in the cluster's state: stopped with it, by cluster:down too.
    const storeOnNode =
      objectStore && realNode
        ? await publishStoreOnNode(state.stateDir, objectStore.endpoint, {
            daemon: options.daemon,
            record: (process) => controlPlane.record(process),
          })
        : undefined;
    if (storeOnNode) log(`The store is at ${storeOnNode.podEndpoint} for the real node's pods`);
    const archive = objectStore ? devArchiveSettings(objectStore, storeOnNode?.podEndpoint) : undefined;

    // The bundle users run (the package's bin and the image's command), not tsc's output.
    const cli = path.join(repoRoot(), "dist", "bin", "playbook.js");
    let controllerUrl: string | undefined;
    if (
      options.startController &&
      existsSync(path.join(repoRoot(), "src", "controller")) &&
      existsSync(cli)
    ) {
      // A port chosen here rather than :0, so that it can be printed and recorded (cluster:down
      // and the tests check that it is closed afterwards).
      const metricsPort = await freePort();
      const logApi = archive
        ? await devLogApi(state.stateDir, {
            daemon: options.daemon ?? false,
            record: (process) => controlPlane.record(process),
          })
        : undefined;
      const controller = startProcess(
        "controller",
        process.execPath,
        [
          ...devControllerArgs({ cli, metricsPort, kueue: kueue !== undefined }),
          ...(archive?.args ?? []),
          ...(logApi?.args ?? []),
        ],
        {
          logFile: path.join(state.stateDir, "logs", "controller.log"),
          env: {
            // A real node has only the images imported into it: the project's is the runner image.
            ...(nodeKind === "real" ? { PLAYBOOK_RUNNER_IMAGE: projectImageName() } : {}),
            ...process.env,
            ...archive?.env,
            KUBECONFIG: state.kubeconfig,
          },
          daemon: options.daemon,
        },
      );
      await controlPlane.record(controller, { name: "controller-metrics", port: metricsPort });
      controllerUrl = `http://127.0.0.1:${metricsPort}`;
      // Serving comes before the caches sync: once /healthz answers, the printed address works.
      const healthz = `${controllerUrl}/healthz`;
      await waitFor(
        `the controller to serve ${healthz}`,
        async () => ((await fetch(healthz).catch(() => undefined))?.ok ? true : undefined),
        {
          timeoutMs: 60_000,
          intervalMs: 100,
          abortIf: () =>
            isRunning(controller) ? undefined : `controller exited:\n${logTail(controller.logFile)}`,
        },
      );
      log(`Started the controller (log ${controller.logFile})`);
      if (logApi) {
        await logApi.register(state.kubeconfig);
        log(`Registered the log API (APIService ${APISERVICE_NAME}): playbook logs reads the archive`);
      }
    } else if (options.startController) {
      log("No controller in this checkout yet (src/controller and dist/bin/playbook.js); not started");
    }

    return {
      state,
      nodeKind,
      ...(controllerUrl ? { controllerUrl } : {}),
      ...(scriptedNode ? { scriptedNode } : {}),
      ...(realNode ? { realNode } : {}),
      ...(kueue ? { kueue } : {}),
      ...(objectStore ? { objectStore } : {}),
      ...(storeOnNode ? { objectStorePodEndpoint: storeOnNode.podEndpoint } : {}),
      async stop() {
        await scriptedNode?.stop();
        await stopRealNode(state.stateDir, state.processes, log);
        await stopCluster(state, log);
      },
    };
  } catch (error) {
    await scriptedNode?.stop().catch(() => {});
    await stopRealNode(state.stateDir, state.processes, log).catch((e) => log(String(e)));
    await stopCluster(state, log).catch(() => {});
    throw error;
  }
}

/** Stops a real node recorded in `stateDir` (before the rest of its cluster), if there is one. */
async function stopRealNodeIn(stateDir: string, log: (message: string) => void): Promise<void> {
  const state = await readClusterState(stateDir).catch(() => undefined);
  await stopRealNode(stateDir, state?.processes ?? [], log);
}

/** For exit hooks: SIGKILL a real node's pods and shims and restore its sysctls. */
export function killRealNodeProcessesSync(stateDir: string): void {
  killRealNodeSync(stateDir);
}

/** Stops a cluster recorded in `stateDir/state.json`, if any; returns whether one was found. */
export async function stopDevCluster(stateDir: string, log: (message: string) => void): Promise<boolean> {
  const state = await readClusterState(stateDir);
  if (!state) return false;
  await stopRealNode(stateDir, state.processes, log);
  await stopCluster(state, log);
  return true;
}

/** Stops what earlier test runs left behind when they were killed before their teardown. */
export async function sweepAbandonedTestClusters(
  parent: string,
  log: (message: string) => void,
): Promise<void> {
  if (!existsSync(parent)) return;
  for (const entry of readdirSync(parent)) {
    const owner = /^test-(\d+)(-real)?$/.exec(entry)?.[1];
    if (!owner) continue;
    try {
      process.kill(Number(owner), 0);
      continue;
    } catch {
      // The owning test run is gone.
    }
    const dir = path.join(parent, entry);
    await stopDevCluster(dir, log).catch((error) =>
      log(`Could not stop abandoned cluster in ${dir}: ${error}`),
    );
    await rm(dir, { recursive: true, force: true });
  }
}
