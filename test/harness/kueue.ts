// Kueue's manager (sigs.k8s.io/kueue's cmd/kueue, built by tools/build.sh) beside a test or dev
// cluster's API server, as a platform team runs it: its CRDs, webhook configurations and
// defaults from the same module (tools/kueue/go.mod names the release), with what a cluster
// without Kueue's Deployment needs instead: the cluster's kubeconfig, the webhook server on
// 127.0.0.1 with a certificate the cluster's CA signs (internal cert management off), the
// webhook configurations pointing at it by URL, pod integration on.
import { execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";
import { parse, parseAllDocuments, stringify } from "yaml";
import { z } from "zod";
import { repoRoot } from "./binaries.js";
import { signServingCertificate } from "./certificates.js";
import { recordInClusterState } from "./control-plane.js";
import {
  freePort,
  logTail,
  type RecordedProcess,
  type StartedProcess,
  startProcess,
  stopProcess,
  waitFor,
} from "./processes.js";
import { publishHostPortOnNode } from "./real-node/real-node.js";

const run = promisify(execFile);

/** Kueue's API group and the version its controllers store and serve first. */
export const KUEUE_GROUP = "kueue.x-k8s.io";
export const KUEUE_VERSION = "v1beta2";
/** The pod label naming the LocalQueue; Kueue manages a plain pod that carries it. */
export const QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name";
/** The label naming a WorkloadPriorityClass. */
export const PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class";
/** The scheduling gate Kueue's pod webhook adds and removes on admission. */
export const ADMISSION_GATE = "kueue.x-k8s.io/admission";
/** The gate it adds beside it while TopologyAwareScheduling is on (the default), removed on admission too. */
export const TOPOLOGY_GATE = "kueue.x-k8s.io/topology";
/** Kueue's label on the pods it manages (value "true"), and its finalizer on them (the same name). */
export const MANAGED_LABEL = "kueue.x-k8s.io/managed";
/** The pod condition Kueue sets before it deletes a pod whose Workload it evicted (preemption...). */
export const TERMINATION_TARGET = "TerminationTarget";
/** The namespace Kueue runs in on a real cluster: its configuration names it; nothing else is in it. */
export const KUEUE_NAMESPACE = "kueue-system";
/** The names config/default gives the webhook configurations (its namePrefix `kueue-`). */
const MUTATING_WEBHOOKS = "kueue-mutating-webhook-configuration";
const VALIDATING_WEBHOOKS = "kueue-validating-webhook-configuration";

/** A Kubernetes label selector, as webhook configurations take it. */
export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: string; values?: string[] }[];
}

export interface KueueOptions {
  /** tools/build.sh's folder: kueue and kubectl. */
  binDir: string;
  kubeconfig: string;
  /**
   * The cluster's state folder: pki/ca.crt and ca.key sign the webhook's certificate, kueue/
   * gets Kueue's configuration and certificates, logs/kueue.log its log (kept with the other logs).
   */
  stateDir: string;
  log?: (message: string) => void;
  /** Outlives this process (`cluster:up`). */
  daemon?: boolean;
  /**
   * Replaces the namespaceSelector of every webhook on a workload kind (pods, Jobs...; not
   * Kueue's own kinds): the tests keep Kueue to their own labelled namespaces. Default: Kueue's.
   */
  workloadNamespaceSelector?: LabelSelector;
  /** Fields of Kueue's Configuration set over the ones here (waitForPodsReady, manageJobsWithoutQueueName...). */
  settings?: Record<string, unknown>;
  /** Records a started process (and a port it listens on) with the cluster, so that it is stopped with it. */
  record?: (process: RecordedProcess, port?: { name: string; port: number }) => Promise<void>;
}

export interface Kueue {
  /** The manager's process (its process group is stopped). */
  process: StartedProcess;
  /** tools/kueue/go.mod's release, e.g. v0.17.0. */
  version: string;
  /** Where Kueue serves its webhooks: https://127.0.0.1:PORT. */
  webhookPort: number;
  /** Where Kueue serves /healthz and /readyz: http://127.0.0.1:PORT. */
  healthPort: number;
  logFile: string;
  /** Deletes its webhook configurations (no pod creation waits on a stopped webhook), then stops it. */
  stop(): Promise<void>;
}

/** The Kueue release tools/kueue/go.mod builds. */
export function kueueVersion(): string {
  const goMod = readFileSync(path.join(repoRoot(), "tools", "kueue", "go.mod"), "utf8");
  const version = /^(?:require\s+|\s+)sigs\.k8s\.io\/kueue (v\S+)/m.exec(goMod)?.[1];
  if (!version) throw new Error("tools/kueue/go.mod does not require sigs.k8s.io/kueue");
  return version;
}

/** Kueue's module in the Go module cache (downloaded when missing): its config/ holds the manifests. */
export async function kueueModuleDir(): Promise<string> {
  const version = kueueVersion();
  const { stdout: goBin } = await run("bash", [path.join(repoRoot(), "tools", "install-go.sh")]);
  const go = path.join(goBin.trim(), "go");
  const { stdout } = await run(go, ["mod", "download", "-json", `sigs.k8s.io/kueue@${version}`], {
    cwd: path.join(repoRoot(), "tools", "kueue"),
    maxBuffer: 1 << 20,
  });
  const dir = z.object({ Dir: z.string().min(1) }).parse(JSON.parse(stdout)).Dir;
  if (!existsSync(path.join(dir, "config", "components"))) throw new Error(`${dir} has no config/components`);
  return dir;
}

type Manifest = Record<string, unknown> & { kind?: string; metadata?: { name?: string } };

const kustomizationSchema = z.object({
  patches: z.array(z.object({ path: z.string().optional(), patch: z.string().optional() })).default([]),
});

/**
 * Kueue's CRDs (config/components/crd/bases) with the conversion webhook its kustomization
 * turns on for some of them, dialed at `url` and trusted through `caBundle`.
 */
export async function kueueCrds(moduleDir: string, webhook: { url: string; caBundle: string }) {
  const crdDir = path.join(moduleDir, "config", "components", "crd");
  const kustomization = kustomizationSchema.parse(
    parse(await readFile(path.join(crdDir, "kustomization.yaml"), "utf8")),
  );
  const resources = z
    .object({ resources: z.array(z.string()) })
    .parse(parse(await readFile(path.join(crdDir, "kustomization.yaml"), "utf8"))).resources;
  const conversions = new Map<string, { conversionReviewVersions?: unknown }>();
  for (const patch of kustomization.patches) {
    if (!patch.path) continue;
    const doc = parse(await readFile(path.join(crdDir, patch.path), "utf8")) as {
      metadata: { name: string };
      spec?: { conversion?: { strategy?: string; webhook?: { conversionReviewVersions?: unknown } } };
    };
    if (doc.spec?.conversion?.strategy === "Webhook")
      conversions.set(doc.metadata.name, doc.spec.conversion.webhook ?? {});
  }
  const crds: Manifest[] = [];
  for (const resource of resources) {
    const crd = parse(await readFile(path.join(crdDir, resource), "utf8")) as Manifest & {
      metadata: { name: string };
      spec: Record<string, unknown>;
    };
    const conversion = conversions.get(crd.metadata.name);
    if (conversion)
      crd.spec.conversion = {
        strategy: "Webhook",
        webhook: {
          conversionReviewVersions: conversion.conversionReviewVersions ?? ["v1"],
          clientConfig: { url: `${webhook.url}/convert`, caBundle: webhook.caBundle },
        },
      };
    crds.push(crd);
  }
  return crds;
}

interface Webhook {
  name: string;
  clientConfig: { service?: { path?: string }; url?: string; caBundle?: string };
  rules?: { apiGroups?: string[] }[];
  namespaceSelector?: LabelSelector;
}

/**
 * Kueue's Mutating/ValidatingWebhookConfigurations (config/components/webhook, with its
 * kustomization's namespaceSelectors), named as config/default names them, each webhook
 * dialed at `url` + its path instead of the in-cluster Service.
 */
export async function kueueWebhookConfigurations(
  moduleDir: string,
  webhook: { url: string; caBundle: string },
  workloadNamespaceSelector?: LabelSelector,
): Promise<Manifest[]> {
  const dir = path.join(moduleDir, "config", "components", "webhook");
  const configurations = parseAllDocuments(await readFile(path.join(dir, "manifests.yaml"), "utf8"))
    .map((doc) => doc.toJS() as (Manifest & { webhooks: Webhook[] }) | null)
    .filter((doc): doc is Manifest & { webhooks: Webhook[] } => doc !== null);
  const kustomization = kustomizationSchema.parse(
    parse(await readFile(path.join(dir, "kustomization.yaml"), "utf8")),
  );
  for (const patch of kustomization.patches) {
    if (!patch.patch) continue;
    const doc = parse(patch.patch) as Manifest & { webhooks?: Partial<Webhook>[] };
    const target = configurations.find((c) => c.kind === doc.kind && c.metadata?.name === doc.metadata?.name);
    for (const patched of doc.webhooks ?? []) {
      const hook = target?.webhooks.find((w) => w.name === patched.name);
      if (hook && patched.namespaceSelector) hook.namespaceSelector = patched.namespaceSelector;
    }
  }
  for (const configuration of configurations) {
    configuration.metadata = {
      name: configuration.kind === "MutatingWebhookConfiguration" ? MUTATING_WEBHOOKS : VALIDATING_WEBHOOKS,
    };
    for (const hook of configuration.webhooks) {
      const hookPath = hook.clientConfig.service?.path;
      if (!hookPath) throw new Error(`Kueue's webhook ${hook.name} names no service path`);
      hook.clientConfig = { url: `${webhook.url}${hookPath}`, caBundle: webhook.caBundle };
      const onKueueKinds = (hook.rules ?? []).every((rule) => (rule.apiGroups ?? []).includes(KUEUE_GROUP));
      if (workloadNamespaceSelector && !onKueueKinds) hook.namespaceSelector = workloadNamespaceSelector;
    }
  }
  return configurations;
}

/**
 * Kueue's Configuration: its defaults but for what running beside the cluster needs. Pod
 * integration is on (with batch/job, the default); leader election is off (one manager per
 * cluster, and a new one never waits on the Lease of one stopped before); the visibility API
 * server is off (nothing registers its APIService, and it would read its certificate from /visibility).
 */
export function kueueConfiguration(args: {
  webhookPort: number;
  healthPort: number;
  metricsPort: number;
  certDir: string;
  settings?: Record<string, unknown>;
}): Record<string, unknown> {
  return {
    apiVersion: "config.kueue.x-k8s.io/v1beta2",
    kind: "Configuration",
    namespace: KUEUE_NAMESPACE,
    health: { healthProbeBindAddress: `127.0.0.1:${args.healthPort}` },
    metrics: { bindAddress: `127.0.0.1:${args.metricsPort}` },
    webhook: { host: "127.0.0.1", port: args.webhookPort, certDir: args.certDir },
    leaderElection: { leaderElect: false },
    internalCertManagement: { enable: false },
    integrations: { frameworks: ["batch/job", "pod"] },
    featureGates: { VisibilityOnDemand: false },
    ...args.settings,
  };
}

/** kubectl with the cluster's kubeconfig; `input` goes to its stdin. Fails with its stderr. */
async function kubectl(options: KueueOptions, args: string[], input?: string): Promise<string> {
  const child = spawn(path.join(options.binDir, "kubectl"), args, {
    env: { ...process.env, KUBECONFIG: options.kubeconfig },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  child.stdin.end(input ?? "");
  const code = await new Promise<number | null>((resolve) => {
    child.on("close", resolve);
    child.on("error", () => resolve(null));
  });
  if (code !== 0) throw new Error(`kubectl ${args.join(" ")} failed: ${stderr.trim() || `exit ${code}`}`);
  return stdout;
}

const documents = (manifests: Manifest[]): string => manifests.map((m) => stringify(m)).join("---\n");

/**
 * Kueue's manager started from tools/build.sh's binary beside the cluster of `kubeconfig`, once
 * its webhooks answer the API server (a ResourceFlavor goes through them). The manager runs in a
 * mount namespace of its own where /etc/kueue/metrics/certs holds its certificate: Kueue
 * without internal cert management reads its metrics certificate from there, whatever it is
 * told, and nothing is written to this machine's /etc (so it needs root, as the real node does).
 */
export async function startKueue(options: KueueOptions): Promise<Kueue> {
  const log = options.log ?? (() => {});
  const t0 = Date.now();
  const version = kueueVersion();
  const binary = path.join(options.binDir, "kueue");
  if (!existsSync(binary))
    throw new Error(`${binary} is missing: tools/build.sh builds it (npm run tools:bin)`);
  const moduleDir = await kueueModuleDir();
  const dir = path.join(options.stateDir, "kueue");
  const certDir = path.join(dir, "serving-certs");
  await mkdir(certDir, { recursive: true });
  const pki = path.join(options.stateDir, "pki");
  const ca = { caFile: path.join(pki, "ca.crt"), caKeyFile: path.join(pki, "ca.key") };
  // controller-runtime's webhook server reads tls.crt and tls.key from its certDir.
  const serving = await signServingCertificate(certDir, "tls", ["IP:127.0.0.1", "DNS:localhost"], ca);
  const caBundle = (await readFile(ca.caFile)).toString("base64");

  const { webhookPort, healthPort, metricsPort } = await kueuePorts();
  const webhook = { url: `https://127.0.0.1:${webhookPort}`, caBundle };
  const configFile = path.join(dir, "config.yaml");
  await writeFile(
    configFile,
    stringify(
      kueueConfiguration({ webhookPort, healthPort, metricsPort, certDir, settings: options.settings }),
    ),
  );

  // Its CRDs first (the manager waits for them), and its namespace.
  const crds = await kueueCrds(moduleDir, webhook);
  await kubectl(options, ["apply", "--server-side", "--force-conflicts", "-f", "-"], documents(crds));
  await kubectl(options, [
    "wait",
    "--for=condition=Established",
    "--timeout=60s",
    ...crds.map((crd) => `crd/${crd.metadata?.name ?? ""}`),
  ]);
  await kubectl(
    options,
    ["apply", "--server-side", "-f", "-"],
    stringify({ apiVersion: "v1", kind: "Namespace", metadata: { name: KUEUE_NAMESPACE } }),
  );

  const record = options.record ?? ((process) => recordInClusterState(options.stateDir, process));
  // Where the API server dials webhooks from: the real node's network namespace when it has one.
  // Its relays are stopped with Kueue: the host's end lives outside the node's namespaces and
  // would outlive the cluster.
  const relays = await publishHostPortOnNode(options.stateDir, "kueue-webhook", webhookPort, {
    daemon: options.daemon ?? false,
    record: (process) => record(process),
  });

  const logFile = path.join(options.stateDir, "logs", "kueue.log");
  const scratch = path.join(dir, "mount");
  await mkdir(scratch, { recursive: true });
  // In the new mount namespace: a tmpfs for an overlay on /etc that adds the metrics certificate.
  const inNamespace = [
    "set -e",
    'mount -t tmpfs kueue-etc "$1"',
    'mkdir "$1/upper" "$1/work"',
    'mount -t overlay kueue-etc -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc',
    "mkdir -p /etc/kueue/metrics/certs",
    'cp "$2" /etc/kueue/metrics/certs/tls.crt',
    'cp "$3" /etc/kueue/metrics/certs/tls.key',
    "shift 3",
    'exec "$@"',
  ].join("\n");
  const started = startProcess(
    "kueue",
    "unshare",
    [
      "--mount",
      "--propagation",
      "private",
      "sh",
      "-c",
      inNamespace,
      "kueue-mount",
      scratch,
      serving.certFile,
      serving.keyFile,
      binary,
      `--config=${configFile}`,
      // Its own flag set keeps only klog-style verbosity: 2 names each admission decision.
      "--zap-log-level=2",
    ],
    { logFile, env: { ...process.env, KUBECONFIG: options.kubeconfig }, daemon: options.daemon ?? false },
  );
  // Once exec'd, the process runs Kueue's binary: that is what stopping it checks /proc for.
  const kueueProcess: StartedProcess = { ...started, executable: binary };
  await record(kueueProcess, { name: "kueue-webhook", port: webhookPort });
  let exit: string | undefined;
  void started.exited.then(({ code, signal }) => {
    exit = `kueue exited (code ${code}, signal ${signal}); log ${logFile}:\n${logTail(logFile)}`;
  });
  const kueue: Kueue = {
    process: kueueProcess,
    version,
    webhookPort,
    healthPort,
    logFile,
    async stop() {
      await kubectl(options, [
        "delete",
        "--ignore-not-found",
        `mutatingwebhookconfiguration/${MUTATING_WEBHOOKS}`,
        `validatingwebhookconfiguration/${VALIDATING_WEBHOOKS}`,
      ]).catch((error) => log(`Kueue's webhook configurations: ${error}`));
      await stopProcess(kueueProcess);
      for (const relay of relays) await stopProcess(relay);
      log(`Stopped Kueue (pid ${kueueProcess.pid}) and its webhook relays`);
    },
  };
  try {
    await waitFor(
      `Kueue's /readyz on 127.0.0.1:${healthPort}`,
      async () => {
        const response = await fetch(`http://127.0.0.1:${healthPort}/readyz`, {
          signal: AbortSignal.timeout(2_000),
        });
        return response.ok ? true : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 100, abortIf: () => exit },
    );
    await kubectl(
      options,
      ["apply", "--server-side", "--force-conflicts", "-f", "-"],
      documents(await kueueWebhookConfigurations(moduleDir, webhook, options.workloadNamespaceSelector)),
    );
    // The API server reaches the webhooks: a ResourceFlavor passes Kueue's mutating and validating ones.
    const probe = `kueue-ready-${randomBytes(3).toString("hex")}`;
    await waitFor(
      "a ResourceFlavor to pass Kueue's webhooks",
      async () => {
        await kubectl(options, ["create", "-f", "-"], stringify(resourceFlavor(probe)));
        return true;
      },
      { timeoutMs: 30_000, intervalMs: 200, abortIf: () => exit },
    );
    await kubectl(options, ["delete", `resourceflavors.${KUEUE_GROUP}`, probe, "--wait=false"]);
  } catch (error) {
    await kueue.stop().catch(() => {});
    throw error;
  }
  log(
    `Kueue ${version} ready after ${Date.now() - t0}ms (webhooks https://127.0.0.1:${webhookPort}, log ${logFile})`,
  );
  return kueue;
}

/** Three distinct free loopback ports: webhooks, health probes, metrics. */
async function kueuePorts(): Promise<{ webhookPort: number; healthPort: number; metricsPort: number }> {
  const taken = new Set<number>();
  const next = async (): Promise<number> => {
    let port = await freePort();
    while (taken.has(port)) port = await freePort();
    taken.add(port);
    return port;
  };
  return { webhookPort: await next(), healthPort: await next(), metricsPort: await next() };
}

/** A ResourceFlavor with no node labels: every node has it. */
export function resourceFlavor(name: string): Manifest {
  return { apiVersion: `${KUEUE_GROUP}/${KUEUE_VERSION}`, kind: "ResourceFlavor", metadata: { name } };
}

export interface ClusterQueueQuota {
  /** The ResourceFlavor the quota is in. */
  flavor: string;
  /** nominalQuota of cpu and memory, e.g. "500m" and "256Mi". */
  cpu: string;
  memory: string;
  /** spec.preemption, e.g. {withinClusterQueue: "LowerPriority"}; Kueue's default preempts nothing. */
  preemption?: Record<string, unknown>;
}

/** A ClusterQueue for every namespace, its cpu and memory quota in one flavor. */
export function clusterQueue(name: string, quota: ClusterQueueQuota): Record<string, unknown> {
  return {
    apiVersion: `${KUEUE_GROUP}/${KUEUE_VERSION}`,
    kind: "ClusterQueue",
    metadata: { name },
    spec: {
      namespaceSelector: {},
      resourceGroups: [
        {
          coveredResources: ["cpu", "memory"],
          flavors: [
            {
              name: quota.flavor,
              resources: [
                { name: "cpu", nominalQuota: quota.cpu },
                { name: "memory", nominalQuota: quota.memory },
              ],
            },
          ],
        },
      ],
      ...(quota.preemption ? { preemption: quota.preemption } : {}),
    },
  };
}

/** A LocalQueue in `namespace` that sends its workloads to `clusterQueueName`. */
export function localQueue(
  name: string,
  namespace: string,
  clusterQueueName: string,
): Record<string, unknown> {
  return {
    apiVersion: `${KUEUE_GROUP}/${KUEUE_VERSION}`,
    kind: "LocalQueue",
    metadata: { name, namespace },
    spec: { clusterQueue: clusterQueueName },
  };
}
