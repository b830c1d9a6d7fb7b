// The bench cluster: the dev cluster's real control plane with an audit log at Metadata level,
// a kube-controller-manager without its Job controller (the reference runs apart, so it can be
// started and stopped, and tuned), the bench node as its own process (the scripted node with an
// autopilot that gives each pod its workload's life, bench-node.ts), and an identity of its own
// for our controller so the audit log tells the two controllers apart.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { stringify } from "yaml";
import { repoRoot, toolsBinDir } from "../harness/binaries.js";
import { AUDIT_LOG, type ClusterState, startControlPlane, stopCluster } from "../harness/control-plane.js";
import {
  freePort,
  isRunning,
  logTail,
  type StartedProcess,
  startProcess,
  stopProcess,
  waitFor,
} from "../harness/processes.js";
import { SCRIPTED_NODE_NAME } from "../harness/scripted-node.js";
import { Api, ApiError, inPool } from "./api.js";

export const OUR_USER = "system:serviceaccount:kube-system:playbook-bench-controller";
export const JOB_CONTROLLER_USER = "system:serviceaccount:kube-system:job-controller";
export const NODE_NAME = SCRIPTED_NODE_NAME;

export interface BenchCluster {
  state: ClusterState;
  api: Api;
  auditLog: string;
  /** Seconds from nothing running to a node that takes pods. */
  upSeconds: number;
  ourKubeconfig: string;
  stop(): Promise<void>;
}

async function run(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<void> {
  const { execFile } = await import("node:child_process");
  await new Promise<void>((resolve, reject) =>
    execFile(command, args, { env }, (error, _stdout, stderr) =>
      error ? reject(new Error(`${command} ${args.join(" ")}: ${stderr}`)) : resolve(),
    ),
  );
}

export async function startBenchCluster(
  stateDir: string,
  log: (message: string) => void,
): Promise<BenchCluster> {
  const binDir = await toolsBinDir("control-plane");
  const t0 = performance.now();
  const controlPlane = await startControlPlane({
    stateDir,
    binDir,
    log,
    auditLog: true,
    controllers: "*,-job",
  });
  const { state } = controlPlane;
  try {
    const env = { ...process.env, KUBECONFIG: state.kubeconfig };
    const kubectl = path.join(binDir, "kubectl");
    await run(kubectl, ["apply", "--server-side", "-f", path.join(repoRoot(), "crds")], env);
    await run(kubectl, ["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"], env);
    const readyFile = path.join(stateDir, "bench-node.ready");
    const node = startProcess(
      "bench-node",
      process.execPath,
      [
        path.join(repoRoot(), "dist", "test", "bench", "bench-node.js"),
        "--kubeconfig",
        state.kubeconfig,
        "--ready-file",
        readyFile,
      ],
      { logFile: path.join(stateDir, "logs", "bench-node.log") },
    );
    await controlPlane.record(node);
    await waitFor("the bench node", async () => (existsSync(readyFile) ? true : undefined), {
      timeoutMs: 120_000,
      abortIf: () => (isRunning(node) ? undefined : `bench node exited:\n${logTail(node.logFile)}`),
    });
    const upSeconds = (performance.now() - t0) / 1000;
    const api = await Api.fromFile(state.kubeconfig);
    const ourKubeconfig = await controllerIdentity(api, state, stateDir);
    log(`Bench cluster up in ${upSeconds.toFixed(1)}s`);
    return {
      state,
      api,
      auditLog: path.join(stateDir, AUDIT_LOG),
      upSeconds,
      ourKubeconfig,
      async stop() {
        api.close();
        await stopCluster(state, log);
      },
    };
  } catch (error) {
    await stopCluster(state, log).catch(() => {});
    throw error;
  }
}

/** A service account bound to cluster-admin, and a kubeconfig with its token, for our controller. */
async function controllerIdentity(api: Api, state: ClusterState, stateDir: string): Promise<string> {
  const name = "playbook-bench-controller";
  await api.request("POST", "/api/v1/namespaces/kube-system/serviceaccounts", { metadata: { name } });
  await api.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
    metadata: { name },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" },
    subjects: [{ kind: "ServiceAccount", name, namespace: "kube-system" }],
  });
  const token = await api.request<{ status: { token: string } }>(
    "POST",
    `/api/v1/namespaces/kube-system/serviceaccounts/${name}/token`,
    { spec: { expirationSeconds: 24 * 3600 } },
  );
  const caFile = path.join(stateDir, "pki", "ca.crt");
  const file = path.join(stateDir, "controller.kubeconfig");
  writeFileSync(
    file,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "bench", cluster: { server: state.server, "certificate-authority": caFile } }],
      users: [{ name, user: { token: token.status.token } }],
      contexts: [{ name: "bench", context: { cluster: "bench", user: name } }],
      "current-context": "bench",
    }),
    { mode: 0o600 },
  );
  return file;
}

export interface RunningController {
  process: StartedProcess;
  stop(): Promise<void>;
}

/**
 * The heap flags the chart sets for its default 256Mi memory limit (NODE_OPTIONS, from
 * charts/playbook-controller/templates/_helpers.tpl; test/controller/chart-heap.test.ts holds them equal).
 */
export const CHART_NODE_OPTIONS = "--max-old-space-size=96 --max-semi-space-size=2";

/**
 * Our controller as a deployment runs it: its own process, every namespace, no Lease (one
 * replica), the chart's heap flags.
 */
export async function startOurController(
  cluster: { state: { stateDir: string }; ourKubeconfig: string },
  options: {
    workers: number;
    extraArgs?: string[];
    nodeOptions?: string[];
    cli?: string;
    /** its log is logs/<name>.log (default controller) */
    name?: string;
    /** env beside KUBECONFIG and NODE_OPTIONS, e.g. the archive's keys */
    env?: Record<string, string>;
  },
): Promise<RunningController & { metricsUrl: string }> {
  const port = await freePort();
  const name = options.name ?? "controller";
  const started = startProcess(
    name,
    process.execPath,
    [
      ...(options.nodeOptions ?? []),
      options.cli ?? path.join(repoRoot(), "dist", "bin", "playbook.js"),
      "controller",
      "--no-leader-election",
      "--metrics-address",
      `127.0.0.1:${port}`,
      "--workers",
      String(options.workers),
      "--log-level",
      "warn",
      ...(options.extraArgs ?? []),
    ],
    {
      logFile: path.join(cluster.state.stateDir, "logs", `${name}.log`),
      env: {
        ...process.env,
        ...options.env,
        KUBECONFIG: cluster.ourKubeconfig,
        NODE_OPTIONS: CHART_NODE_OPTIONS,
      },
    },
  );
  const metricsUrl = `http://127.0.0.1:${port}`;
  await waitFor(
    "our controller's /readyz",
    async () =>
      (await fetch(`${metricsUrl}/readyz`).catch(() => undefined))?.status === 200 ? true : undefined,
    {
      timeoutMs: 120_000,
      abortIf: () => (isRunning(started) ? undefined : `controller exited:\n${logTail(started.logFile)}`),
    },
  );
  return { process: started, metricsUrl, stop: () => stopProcess(started) };
}

/**
 * kube-controller-manager running only its Job controller, as the cluster's own would, at its
 * default client limits or with them lifted.
 */
export async function startJobController(
  cluster: BenchCluster,
  options: { lifted: boolean; concurrentJobSyncs: number },
): Promise<RunningController> {
  const { stateDir, binDir } = cluster.state;
  const port = await freePort();
  const started = startProcess(
    "job-controller",
    path.join(binDir, "kube-controller-manager"),
    [
      `--kubeconfig=${path.join(stateDir, "controller-manager.kubeconfig")}`,
      "--controllers=job",
      "--bind-address=127.0.0.1",
      `--secure-port=${port}`,
      `--cert-dir=${path.join(stateDir, "job-controller-certs")}`,
      "--leader-elect=false",
      "--use-service-account-credentials=true",
      "--profiling=false",
      ...(options.lifted
        ? [
            "--kube-api-qps=1000",
            "--kube-api-burst=2000",
            `--concurrent-job-syncs=${options.concurrentJobSyncs}`,
          ]
        : []),
    ],
    { logFile: path.join(stateDir, "logs", `job-controller${options.lifted ? "-lifted" : ""}.log`) },
  );
  await waitFor(
    "the Job controller's /healthz",
    async () => {
      const { default: https } = await import("node:https");
      const status = await new Promise<number>((resolve, reject) =>
        https
          .get(
            `https://127.0.0.1:${port}/healthz`,
            { rejectUnauthorized: false, timeout: 2_000 },
            (response) => {
              response.resume();
              resolve(response.statusCode ?? 0);
            },
          )
          .on("error", reject),
      );
      return status === 200 ? true : undefined;
    },
    {
      timeoutMs: 120_000,
      abortIf: () => (isRunning(started) ? undefined : `job controller exited:\n${logTail(started.logFile)}`),
    },
  );
  return { process: started, stop: () => stopProcess(started) };
}

export async function setNodeSchedulable(api: Api, schedulable: boolean): Promise<void> {
  await api.request(
    "PATCH",
    `/api/v1/nodes/${NODE_NAME}`,
    { spec: { unschedulable: schedulable ? null : true } },
    "application/merge-patch+json",
  );
}

export async function createNamespace(api: Api, name: string): Promise<void> {
  await api.request("POST", "/api/v1/namespaces", { metadata: { name } });
  // Pods are refused until the namespace's default service account exists.
  await waitFor(
    `service account default in ${name}`,
    async () => {
      await api.request("GET", `/api/v1/namespaces/${name}/serviceaccounts/default`);
      return true;
    },
    { timeoutMs: 60_000, intervalMs: 100 },
  );
}

/**
 * Deletes the namespace and waits until it is gone. The Job controller's pods carry its
 * job-tracking finalizer, which only a running Job controller takes off, one PATCH at a time at
 * its client limits (2,000 pods took longer than five minutes at 20 QPS): the bench takes them off
 * itself, so that the namespace goes whichever controller ran.
 */
export async function deleteNamespace(api: Api, name: string, timeoutMs = 300_000): Promise<void> {
  const pods = (await api.request("GET", `/api/v1/namespaces/${name}/pods`)) as {
    items?: { metadata: { name: string; finalizers?: string[] } }[];
  };
  const held = (pods.items ?? []).filter((pod) => (pod.metadata.finalizers ?? []).length > 0);
  await inPool(held, 32, (pod) =>
    api
      .request(
        "PATCH",
        `/api/v1/namespaces/${name}/pods/${pod.metadata.name}`,
        { metadata: { finalizers: null } },
        "application/merge-patch+json",
      )
      .catch(() => {}),
  );
  await api.request("DELETE", `/api/v1/namespaces/${name}`).catch(() => {});
  await waitFor(
    `namespace ${name} to be deleted`,
    async () => {
      try {
        await api.request("GET", `/api/v1/namespaces/${name}`);
        return undefined;
      } catch (error) {
        if (error instanceof ApiError && error.status === 404) return true;
        throw error;
      }
    },
    { timeoutMs, intervalMs: 250 },
  );
}

/** Resident memory (VmRSS) in MB and CPU seconds (user + system) of a process. */
export function processUsage(pid: number): { rssMb: number; cpuSeconds: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? Number.NaN);
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // utime and stime are fields 14 and 15 of stat, in clock ticks (100 a second on Linux).
  const ticks = Number(fields[11]) + Number(fields[12]);
  return { rssMb: rssKb / 1024, cpuSeconds: ticks / 100 };
}

export async function readText(file: string): Promise<string> {
  return readFile(file, "utf8");
}
