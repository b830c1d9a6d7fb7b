import { existsSync, readFileSync } from "node:fs";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import https from "node:https";
import path from "node:path";
import { stringify } from "yaml";
import { z } from "zod";
import {
  type ClusterCertificates,
  FRONT_PROXY_CLIENT_NAME,
  generateClusterCertificates,
} from "./certificates.js";
import {
  freePort,
  isListening,
  isRunning,
  logTail,
  type RecordedProcess,
  type StartedProcess,
  startProcess,
  stopProcess,
  waitFor,
} from "./processes.js";

const recordedProcessSchema = z.object({
  name: z.string(),
  pid: z.number().int().positive(),
  executable: z.string(),
  logFile: z.string(),
});

/** What a started cluster leaves in `stateDir/state.json`, so another process can stop it. */
export const clusterStateSchema = z.object({
  stateDir: z.string(),
  binDir: z.string(),
  kubeconfig: z.string(),
  server: z.string(),
  ports: z.record(z.string(), z.number().int().positive()),
  processes: z.array(recordedProcessSchema),
});
export type ClusterState = z.infer<typeof clusterStateSchema>;

export interface ControlPlaneOptions {
  /** Holds certificates, etcd data, kubeconfigs, logs and state.json; emptied first. */
  stateDir: string;
  /** The folder `npm run tools:bin` printed. */
  binDir: string;
  /** Leave the processes running after this Node process exits (`cluster:up`). */
  daemon?: boolean;
  log?: (message: string) => void;
  /**
   * Audit every request at Metadata level (who, verb, resource, response code) to
   * `stateDir/logs/audit.log`, one JSON object a line: the benchmarks count requests with it.
   */
  auditLog?: boolean;
  /** Replaces kube-controller-manager's `--controllers` list, e.g. `*,-job` to run a Job controller apart. */
  controllers?: string;
  /**
   * The address the `kubernetes` Service's endpoint names (default 127.0.0.1, where the API
   * server listens). A real node's pods reach the API server at this address inside the node's
   * network namespace, where a relay listens on it.
   */
  advertiseAddress?: string;
  /**
   * A Unix socket where an HTTP CONNECT proxy dials for the API server (its `cluster` egress
   * selector): its connections to nodes, pods and Services (logs, exec, port-forward,
   * pods/proxy, services/proxy) are made from wherever that proxy runs, the real node's network
   * namespace, never from this machine's.
   */
  clusterEgressSocket?: string;
}

/** Where `auditLog` writes, relative to the state folder. */
export const AUDIT_LOG = path.join("logs", "audit.log");

const METADATA_AUDIT_POLICY = stringify({
  apiVersion: "audit.k8s.io/v1",
  kind: "Policy",
  // RequestReceived would log each request twice; ResponseComplete carries the response code.
  omitStages: ["RequestReceived"],
  rules: [{ level: "Metadata" }],
});

export interface ControlPlane {
  state: ClusterState;
  /** Adds a process started beside the control plane (real node, controller) to state.json. */
  record(process: RecordedProcess, port?: { name: string; port: number }): Promise<void>;
}

const stateFile = (stateDir: string) => path.join(stateDir, "state.json");

async function writeState(state: ClusterState): Promise<void> {
  const file = stateFile(state.stateDir);
  await writeFile(`${file}.tmp`, `${JSON.stringify(state, null, 2)}\n`);
  await rename(`${file}.tmp`, file);
}

export async function readClusterState(stateDir: string): Promise<ClusterState | undefined> {
  const file = stateFile(stateDir);
  if (!existsSync(file)) return undefined;
  return clusterStateSchema.parse(JSON.parse(await readFile(file, "utf8")));
}

/**
 * Records a process started after the cluster (a real node's kubelet or containerd started again
 * by a test, from another process than the one that started the cluster) in its state.json, so
 * that cluster:down, teardown and the exit hooks, which read that file, stop it too.
 */
export async function recordInClusterState(stateDir: string, process: RecordedProcess): Promise<void> {
  const state = await readClusterState(stateDir);
  if (!state) throw new Error(`no cluster is recorded in ${stateDir}`);
  const { name, pid, executable, logFile } = process;
  state.processes.push({ name, pid, executable, logFile });
  await writeState(state);
}

/** For exit hooks, which cannot wait: SIGKILL every recorded process group that still runs. */
export function killRecordedProcessesSync(stateDir: string): void {
  let state: ClusterState;
  try {
    state = clusterStateSchema.parse(JSON.parse(readFileSync(stateFile(stateDir), "utf8")));
  } catch {
    return;
  }
  for (const recorded of state.processes) {
    if (!isRunning(recorded)) continue;
    try {
      process.kill(-recorded.pid, "SIGKILL");
    } catch {
      // Gone meanwhile.
    }
  }
}

function kubeconfigYaml(server: string, caFile: string, user: string, certFile: string, keyFile: string) {
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "playbook-dev", cluster: { server, "certificate-authority": caFile } }],
    users: [{ name: user, user: { "client-certificate": certFile, "client-key": keyFile } }],
    contexts: [{ name: "playbook-dev", context: { cluster: "playbook-dev", user } }],
    "current-context": "playbook-dev",
  });
}

/** GET over TLS; resolves with the status code and body, never throws on HTTP errors. */
function httpsGet(
  url: string,
  tls: { ca?: Buffer; cert?: Buffer; key?: Buffer; rejectUnauthorized?: boolean },
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = https.get(url, { ...tls, timeout: 2_000 }, (response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => {
        body += chunk;
      });
      response.on("end", () => resolve({ status: response.statusCode ?? 0, body }));
    });
    request.on("timeout", () => request.destroy(new Error("request timed out")));
    request.on("error", reject);
  });
}

async function httpGet(url: string): Promise<{ status: number; body: string }> {
  const response = await fetch(url, { signal: AbortSignal.timeout(2_000) });
  return { status: response.status, body: await response.text() };
}

/** Fails fast with the log tail when the process exits while we wait on it. */
function exitWatcher(started: StartedProcess): () => string | undefined {
  let exit: string | undefined;
  void started.exited.then(({ code, signal }) => {
    exit = `${started.name} exited (code ${code}, signal ${signal}); log ${started.logFile}:\n${logTail(started.logFile)}`;
  });
  return () => exit;
}

/**
 * Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback ports and
 * returns once each reports healthy. On failure everything started so far is stopped.
 */
export async function startControlPlane(options: ControlPlaneOptions): Promise<ControlPlane> {
  const log = options.log ?? (() => {});
  const { stateDir, binDir } = options;
  const previous = await readClusterState(stateDir).catch(() => undefined);
  if (previous) {
    log(`Stopping the cluster already recorded in ${stateDir}`);
    await stopCluster(previous, log);
  }
  await rm(stateDir, { recursive: true, force: true });
  const logDir = path.join(stateDir, "logs");
  await mkdir(logDir, { recursive: true });

  const ports: Record<string, number> = {};
  for (const name of ["etcd", "etcdPeer", "apiserver", "controllerManager", "scheduler"]) {
    let port = await freePort();
    while (Object.values(ports).includes(port)) port = await freePort();
    ports[name] = port;
  }
  const port = (name: string): number => {
    const value = ports[name];
    if (value === undefined) throw new Error(`no port for ${name}`);
    return value;
  };
  const server = `https://127.0.0.1:${port("apiserver")}`;
  const state: ClusterState = {
    stateDir,
    binDir,
    kubeconfig: path.join(stateDir, "kubeconfig"),
    server,
    ports,
    processes: [],
  };

  const started: StartedProcess[] = [];
  const launch = async (name: string, binary: string, args: string[]): Promise<StartedProcess> => {
    const process = startProcess(name, path.join(binDir, binary), args, {
      logFile: path.join(logDir, `${name}.log`),
      daemon: options.daemon ?? false,
    });
    started.push(process);
    state.processes.push({
      name: process.name,
      pid: process.pid,
      executable: process.executable,
      logFile: process.logFile,
    });
    await writeState(state);
    return process;
  };

  try {
    const t0 = Date.now();
    const certs = await generateClusterCertificates(path.join(stateDir, "pki"));
    const [adminCert, adminKey, ca] = await Promise.all([
      readFile(certs.admin.certFile),
      readFile(certs.admin.keyFile),
      readFile(certs.caFile),
    ]);
    await writeKubeconfigs(stateDir, server, certs);
    log(`Generated certificates in ${Date.now() - t0}ms`);

    const etcdUrl = `http://127.0.0.1:${port("etcd")}`;
    const peerUrl = `http://127.0.0.1:${port("etcdPeer")}`;
    const etcd = await launch("etcd", "etcd", [
      "--name=default",
      `--data-dir=${path.join(stateDir, "etcd")}`,
      `--listen-client-urls=${etcdUrl}`,
      `--advertise-client-urls=${etcdUrl}`,
      `--listen-peer-urls=${peerUrl}`,
      `--initial-advertise-peer-urls=${peerUrl}`,
      `--initial-cluster=default=${peerUrl}`,
      // A throwaway store: durability is not worth the fsync latency.
      "--unsafe-no-fsync",
      "--log-level=warn",
    ]);
    await waitFor(
      "etcd /health",
      async () => {
        const { status, body } = await httpGet(`${etcdUrl}/health`);
        return status === 200 && /"health":\s*"true"/.test(body) ? true : undefined;
      },
      { timeoutMs: 30_000, abortIf: exitWatcher(etcd) },
    );
    log(`etcd healthy on ${etcdUrl} after ${Date.now() - t0}ms`);

    const apiserver = await launch("kube-apiserver", "kube-apiserver", [
      `--etcd-servers=${etcdUrl}`,
      "--bind-address=127.0.0.1",
      `--advertise-address=${options.advertiseAddress ?? "127.0.0.1"}`,
      `--secure-port=${port("apiserver")}`,
      `--cert-dir=${path.join(stateDir, "apiserver-certs")}`,
      `--tls-cert-file=${certs.serving.certFile}`,
      `--tls-private-key-file=${certs.serving.keyFile}`,
      `--client-ca-file=${certs.caFile}`,
      // Node: a real kubelet (`--node real`) gets what its pods need, as on any cluster.
      "--authorization-mode=Node,RBAC",
      "--anonymous-auth=false",
      "--enable-admission-plugins=PodSecurity,NodeRestriction",
      `--kubelet-client-certificate=${certs.kubeletClient.certFile}`,
      `--kubelet-client-key=${certs.kubeletClient.keyFile}`,
      // Privileged pods must reach PodSecurity admission, which is what the tests exercise.
      "--allow-privileged=true",
      `--service-account-key-file=${certs.serviceAccountPublicKeyFile}`,
      `--service-account-signing-key-file=${certs.serviceAccountKeyFile}`,
      "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
      "--api-audiences=https://kubernetes.default.svc.cluster.local",
      "--service-cluster-ip-range=10.0.0.0/24",
      // A node is reached at its InternalIP for `kubectl logs` and exec; its hostname resolves nowhere.
      "--kubelet-preferred-address-types=InternalIP",
      "--profiling=false",
      ...aggregationArgs(certs),
      ...(await auditArgs(options, stateDir)),
      ...(await egressArgs(options, stateDir)),
    ]);
    await waitFor(
      "kube-apiserver /readyz",
      async () => {
        const { status } = await httpsGet(`${server}/readyz`, { ca, cert: adminCert, key: adminKey });
        return status === 200 ? true : undefined;
      },
      { timeoutMs: 60_000, abortIf: exitWatcher(apiserver) },
    );
    log(`kube-apiserver ready on ${server} after ${Date.now() - t0}ms`);

    const controllerManager = await launch("kube-controller-manager", "kube-controller-manager", [
      `--kubeconfig=${path.join(stateDir, "controller-manager.kubeconfig")}`,
      "--bind-address=127.0.0.1",
      `--secure-port=${port("controllerManager")}`,
      `--cert-dir=${path.join(stateDir, "controller-manager-certs")}`,
      "--leader-elect=false",
      "--use-service-account-credentials=true",
      `--service-account-private-key-file=${certs.serviceAccountKeyFile}`,
      `--root-ca-file=${certs.caFile}`,
      `--cluster-signing-cert-file=${certs.caFile}`,
      `--cluster-signing-key-file=${certs.caKeyFile}`,
      // A new node is tainted not-ready until this controller's next pass sees it Ready.
      "--node-monitor-period=1s",
      "--profiling=false",
      ...(options.controllers !== undefined ? [`--controllers=${options.controllers}`] : []),
    ]);
    const scheduler = await launch("kube-scheduler", "kube-scheduler", [
      `--kubeconfig=${path.join(stateDir, "scheduler.kubeconfig")}`,
      "--bind-address=127.0.0.1",
      `--secure-port=${port("scheduler")}`,
      `--cert-dir=${path.join(stateDir, "scheduler-certs")}`,
      "--leader-elect=false",
      "--profiling=false",
    ]);
    await Promise.all(
      [
        { process: controllerManager, port: port("controllerManager") },
        { process: scheduler, port: port("scheduler") },
      ].map(({ process, port }) =>
        waitFor(
          `${process.name} /healthz`,
          async () => {
            const { status } = await httpsGet(`https://127.0.0.1:${port}/healthz`, {
              rejectUnauthorized: false,
            });
            return status === 200 ? true : undefined;
          },
          { timeoutMs: 60_000, abortIf: exitWatcher(process) },
        ),
      ),
    );
    log(`kube-controller-manager and kube-scheduler healthy after ${Date.now() - t0}ms`);
  } catch (error) {
    await stopCluster(state, log).catch(() => {});
    throw error;
  }

  return {
    state,
    async record(process, extraPort) {
      state.processes.push({
        name: process.name,
        pid: process.pid,
        executable: process.executable,
        logFile: process.logFile,
      });
      if (extraPort) state.ports[extraPort.name] = extraPort.port;
      await writeState(state);
    },
  };
}

/**
 * The aggregation layer, as kubeadm sets it up: the API server proxies an aggregated group's
 * requests (the controller's log API, logs.playbook.dev) with its front-proxy client certificate
 * and the caller in X-Remote-* headers, to an endpoint of the APIService's Service (not its
 * ClusterIP: nothing here routes Service IPs).
 */
function aggregationArgs(certs: ClusterCertificates): string[] {
  return [
    `--requestheader-client-ca-file=${certs.frontProxyCaFile}`,
    `--requestheader-allowed-names=${FRONT_PROXY_CLIENT_NAME}`,
    "--requestheader-username-headers=X-Remote-User",
    "--requestheader-group-headers=X-Remote-Group",
    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
    `--proxy-client-cert-file=${certs.frontProxyClient.certFile}`,
    `--proxy-client-key-file=${certs.frontProxyClient.keyFile}`,
    "--enable-aggregator-routing=true",
  ];
}

async function egressArgs(options: ControlPlaneOptions, stateDir: string): Promise<string[]> {
  if (options.clusterEgressSocket === undefined) return [];
  const file = path.join(stateDir, "egress-selector.yaml");
  await writeFile(
    file,
    stringify({
      apiVersion: "apiserver.k8s.io/v1beta1",
      kind: "EgressSelectorConfiguration",
      egressSelections: [
        {
          name: "cluster",
          connection: {
            proxyProtocol: "HTTPConnect",
            transport: { uds: { udsName: options.clusterEgressSocket } },
          },
        },
      ],
    }),
  );
  return [`--egress-selector-config-file=${file}`];
}

async function auditArgs(options: ControlPlaneOptions, stateDir: string): Promise<string[]> {
  if (!options.auditLog) return [];
  const policyFile = path.join(stateDir, "audit-policy.yaml");
  await writeFile(policyFile, METADATA_AUDIT_POLICY);
  return [
    `--audit-policy-file=${policyFile}`,
    `--audit-log-path=${path.join(stateDir, AUDIT_LOG)}`,
    "--audit-log-format=json",
    // One file for the whole run: the reader counts every line.
    "--audit-log-maxsize=0",
    "--audit-log-maxbackup=0",
    // Written as requests complete, not batched, so a count taken right after a run is whole.
    "--audit-log-mode=blocking",
  ];
}

async function writeKubeconfigs(stateDir: string, server: string, certs: ClusterCertificates) {
  await Promise.all([
    writeFile(
      path.join(stateDir, "kubeconfig"),
      kubeconfigYaml(server, certs.caFile, "admin", certs.admin.certFile, certs.admin.keyFile),
      { mode: 0o600 },
    ),
    writeFile(
      path.join(stateDir, "controller-manager.kubeconfig"),
      kubeconfigYaml(
        server,
        certs.caFile,
        "system:kube-controller-manager",
        certs.controllerManager.certFile,
        certs.controllerManager.keyFile,
      ),
      { mode: 0o600 },
    ),
    writeFile(
      path.join(stateDir, "scheduler.kubeconfig"),
      kubeconfigYaml(
        server,
        certs.caFile,
        "system:kube-scheduler",
        certs.scheduler.certFile,
        certs.scheduler.keyFile,
      ),
      { mode: 0o600 },
    ),
  ]);
}

/**
 * Stops every recorded process, last started first (so the real node and the controller go
 * before the apiserver, and etcd last), then checks that no recorded port still listens.
 */
export async function stopCluster(state: ClusterState, log: (message: string) => void = () => {}) {
  for (const recorded of [...state.processes].reverse()) {
    if (!isRunning(recorded)) continue;
    await stopProcess(recorded);
    log(`Stopped ${recorded.name} (pid ${recorded.pid})`);
  }
  const stillListening: number[] = [];
  for (const port of Object.values(state.ports)) {
    if (await isListening(port)) stillListening.push(port);
  }
  if (stillListening.length > 0)
    throw new Error(`ports still listening after stop: ${stillListening.join(", ")}`);
  await rm(stateFile(state.stateDir), { force: true });
}
