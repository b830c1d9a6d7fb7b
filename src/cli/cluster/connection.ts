// The cluster a command talks to, found as kubectl finds it (--kubeconfig, else KUBECONFIG, else
// ~/.kube/config; --context, else current-context; -n, else the context's namespace), and every
// failure to reach or use it said in one or two lines naming what and where.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { z } from "zod";
import { GROUP, PLURAL } from "../../api/playbook.js";
import { ApiClient, ApiError } from "../../runtime/api-client.js";
import { loadKubeConfigFiles } from "../../runtime/kube-config.js";
import { EXIT } from "../exit-codes.js";

export interface ClusterFlags {
  kubeconfig?: string | undefined;
  context?: string | undefined;
  namespace?: string | undefined;
}

export interface Cluster {
  kubeConfig: KubeConfig;
  api: ApiClient;
  /** -n, else the context's namespace, else "default". */
  namespace: string;
  /** For error messages. */
  context: string;
  server: string;
}

/** A failure the command reports in its message alone (no stack), with the exit code it ends with. */
export class ClusterError extends Error {
  readonly exitCode: number;

  constructor(message: string, exitCode: number) {
    super(message);
    this.name = "ClusterError";
    this.exitCode = exitCode;
  }
}

/** A kubeconfig that leads nowhere is invalid input: nothing was asked of any cluster. */
const invalid = (message: string) => new ClusterError(message, EXIT.invalid);

/** Where a pod's service account namespace is (kubectl's in-cluster default namespace). */
const IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/** The kubeconfig files to read, as kubectl chooses them, and what chose them (for messages). */
function kubeconfigFiles(flags: ClusterFlags): { files: string[]; from: string } | "in-cluster" {
  if (flags.kubeconfig) {
    if (!fs.existsSync(flags.kubeconfig)) {
      throw invalid(`--kubeconfig ${flags.kubeconfig}: no such file (${path.resolve(flags.kubeconfig)})`);
    }
    return { files: [flags.kubeconfig], from: `--kubeconfig ${flags.kubeconfig}` };
  }
  const fromEnv = process.env.KUBECONFIG;
  if (fromEnv) {
    // kubectl skips the files of KUBECONFIG that do not exist, and refuses when none does.
    const named = fromEnv.split(path.delimiter).filter(Boolean);
    const files = named.filter((file) => fs.existsSync(file));
    if (files.length === 0) throw invalid(`KUBECONFIG=${fromEnv}: no such file`);
    return { files, from: `KUBECONFIG=${fromEnv}` };
  }
  const home = path.join(os.homedir(), ".kube", "config");
  // In a pod with no kubeconfig (a CI job's), its service account, as kubectl does.
  if (!fs.existsSync(home) && process.env.KUBERNETES_SERVICE_HOST && process.env.KUBERNETES_SERVICE_PORT) {
    return "in-cluster";
  }
  if (!fs.existsSync(home)) {
    throw invalid(
      `no kubeconfig: ${home} does not exist and KUBECONFIG is not set (or pass --kubeconfig FILE)`,
    );
  }
  return { files: [home], from: home };
}

export function connect(flags: ClusterFlags): Cluster {
  const found = kubeconfigFiles(flags);
  if (found === "in-cluster") return connectInCluster(flags);
  const { files, from } = found;
  let kubeConfig: KubeConfig;
  try {
    kubeConfig = loadKubeConfigFiles(files, flags.context);
  } catch (error) {
    throw invalid(`kubeconfig ${from}: ${(error as Error).message.split("\n")[0]}`);
  }
  const contextName = kubeConfig.getCurrentContext();
  if (!contextName) throw invalid(`kubeconfig ${from}: no current-context (pass --context NAME)`);
  const context = kubeConfig.getContextObject(contextName);
  if (!context) {
    const known = kubeConfig.contexts.map((item) => item.name);
    throw invalid(
      `${flags.context ? "--context" : "current-context"} ${contextName}: no such context in kubeconfig ${from}${known.length ? ` (it has ${known.join(", ")})` : ""}`,
    );
  }
  const cluster = kubeConfig.getCurrentCluster();
  if (!cluster) {
    throw invalid(`context ${contextName}: its cluster ${context.cluster} is not in kubeconfig ${from}`);
  }
  let api: ApiClient;
  try {
    api = new ApiClient(kubeConfig);
  } catch (error) {
    throw invalid(`context ${contextName}: ${(error as Error).message}`);
  }
  return {
    kubeConfig,
    api,
    namespace: flags.namespace || context.namespace || "default",
    context: contextName,
    server: cluster.server,
  };
}

function connectInCluster(flags: ClusterFlags): Cluster {
  if (flags.context)
    throw invalid(`--context ${flags.context}: no kubeconfig (in a pod, its service account is used)`);
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromCluster();
  let podNamespace = "";
  try {
    podNamespace = fs.readFileSync(IN_CLUSTER_NAMESPACE_FILE, "utf8").trim();
  } catch {
    // No service account namespace mounted: "default", as kubectl.
  }
  const server = kubeConfig.getCurrentCluster()?.server ?? "";
  return {
    kubeConfig,
    api: new ApiClient(kubeConfig),
    namespace: flags.namespace || podNamespace || "default",
    context: "in-cluster (the pod's service account)",
    server,
  };
}

const StatusSchema = z.looseObject({
  message: z.string().optional(),
  reason: z.string().optional(),
  details: z.looseObject({ name: z.string().optional() }).optional(),
});

const NETWORK_FAILURE =
  /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN|EPIPE|socket hang up|\(timeout\)|certificate|self[- ]signed|TLS/i;

/** What the API server said in its answer: its Status's message, else a text body's first line. */
export function serverSaid(error: ApiError): string | undefined {
  const status = StatusSchema.safeParse(error.body).data;
  if (status?.message !== undefined) return status.message;
  return typeof error.body === "string" ? error.body.trim().split("\n")[0] : undefined;
}

/** The message of an error and of its causes, on one line. */
function messageChain(error: unknown): string {
  const parts: string[] = [];
  for (let current: unknown = error; current && parts.length < 4; current = (current as Error).cause) {
    const text = current instanceof Error ? current.message : String(current);
    const code = (current as { code?: unknown }).code;
    const line = text.split("\n")[0] || (typeof code === "string" ? code : "");
    if (line && !parts.some((part) => part.includes(line))) parts.push(line);
  }
  return parts.join(": ");
}

/**
 * One or two lines naming the verb, resource, name, namespace, context and server; exit code 2 for
 * a missing CRD, RBAC, not found or a refused object, 3 when the API server could not be reached
 * or failed. Never a stack trace.
 */
export function describeApiFailure(
  error: unknown,
  what: { verb: string; resource: string; name?: string; kind?: string },
  cluster: Cluster,
): ClusterError {
  if (error instanceof ClusterError) return error;
  const resource = what.resource === PLURAL ? `${PLURAL}.${GROUP}` : what.resource;
  const object = `${resource}${what.name ? ` ${what.name}` : ""} in namespace ${cluster.namespace}`;
  const where = `(context ${cluster.context}, server ${cluster.server})`;
  if (error instanceof ApiError) {
    const status = StatusSchema.safeParse(error.body).data;
    const said = serverSaid(error);
    const detail = said ? `\n  the API server said: ${said}` : "";
    switch (error.code) {
      case 404:
        // A missing object has a Status naming it; a missing resource (no CRD) does not.
        if (status?.details?.name) {
          return new ClusterError(`${what.verb} ${object}: not found ${where}`, EXIT.invalid);
        }
        return new ClusterError(
          `${what.verb} ${object}: the API server has no resource ${resource}: is the ${what.kind ?? "Playbook"} CRD installed? ${where}${detail}`,
          EXIT.invalid,
        );
      case 401:
        return new ClusterError(
          `${what.verb} ${object}: unauthorized: the API server did not accept the credentials of context ${cluster.context} ${where}${detail}`,
          EXIT.invalid,
        );
      case 403:
        return new ClusterError(`${what.verb} ${object}: forbidden by RBAC ${where}${detail}`, EXIT.invalid);
      case 409:
      case 422:
      case 400:
        return new ClusterError(`${what.verb} ${object}: refused ${where}${detail}`, EXIT.invalid);
      default:
        return new ClusterError(
          `${what.verb} ${object}: the API server answered ${error.code} ${where}${detail}`,
          EXIT.lost,
        );
    }
  }
  const text = messageChain(error);
  if (NETWORK_FAILURE.test(text)) {
    return new ClusterError(
      `${what.verb} ${object}: cannot reach the API server ${where}\n  ${text}`,
      EXIT.lost,
    );
  }
  return new ClusterError(`${what.verb} ${object}: ${text} ${where}`, EXIT.lost);
}
