// The API clients the controller uses, and the few error facts it decides on.
import {
  type ConfigurationOptions,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  createConfiguration,
  KubeConfig,
  Observable,
  type ObservableMiddleware,
  type RequestContext,
  type ResponseContext,
  ServerConfiguration,
  setHeaderMiddleware,
} from "@kubernetes/client-node";

export const GROUP = "playbook.dev";
export const VERSION = "v1alpha1";
export const PLURAL = "playbooks";

export interface KubeClients {
  kubeConfig: KubeConfig;
  core: CoreV1Api;
  custom: CustomObjectsApi;
  coordination: CoordinationV1Api;
}

/** KUBECONFIG, then ~/.kube/config, then the in-cluster service account, as kubectl does. */
export function loadKubeConfig(): KubeConfig {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromDefault();
  if (!kubeConfig.getCurrentCluster()) {
    throw new Error("no Kubernetes cluster configured: set KUBECONFIG or run in a pod");
  }
  return kubeConfig;
}

/** How long one API call may take unless it is given a shorter deadline. */
export const API_CALL_TIMEOUT_MS = 30_000;

/**
 * Clients whose every call ends by its deadline: a call on a dead connection would otherwise
 * wait forever (client-node sets no timeout), holding a worker or a Lease renew with it.
 */
export function makeClients(kubeConfig: KubeConfig, callTimeoutMs = API_CALL_TIMEOUT_MS): KubeClients {
  const cluster = kubeConfig.getCurrentCluster();
  if (!cluster) throw new Error("no Kubernetes cluster configured: set KUBECONFIG or run in a pod");
  // As KubeConfig.makeApiClient builds it, plus the deadline.
  const configuration = createConfiguration({
    baseServer: new ServerConfiguration(cluster.server, {}),
    authMethods: { default: kubeConfig },
    middleware: [
      setHeaderMiddleware("User-Agent", "playbook-controller"),
      signalMiddleware(() => AbortSignal.timeout(callTimeoutMs)),
    ],
  });
  return {
    kubeConfig,
    core: new CoreV1Api(configuration),
    custom: new CustomObjectsApi(configuration),
    coordination: new CoordinationV1Api(configuration),
  };
}

/** Per-call options that also end the call when the signal aborts (as well as at its deadline). */
export function abortedBy(
  signal: AbortSignal,
  ...more: ObservableMiddleware[]
): ConfigurationOptions<ObservableMiddleware> {
  return { middleware: [...more, signalMiddleware(() => signal)], middlewareMergeStrategy: "append" };
}

function signalMiddleware(signal: () => AbortSignal): ObservableMiddleware {
  return {
    pre(context: RequestContext) {
      const earlier = context.getSignal();
      const own = signal();
      context.setSignal(earlier ? AbortSignal.any([earlier, own]) : own);
      return new Observable(Promise.resolve(context));
    },
    post: (response: ResponseContext) => new Observable(Promise.resolve(response)),
  };
}

/** The HTTP status of a failed API call (client-node's ApiException carries it as `code`). */
export function statusCodeOf(error: unknown): number | undefined {
  if (error && typeof error === "object") {
    const code = (error as { code?: unknown }).code;
    if (typeof code === "number") return code;
    const statusCode = (error as { statusCode?: unknown }).statusCode;
    if (typeof statusCode === "number") return statusCode;
  }
  return undefined;
}

export const isNotFound = (error: unknown) => statusCodeOf(error) === 404;
export const isConflict = (error: unknown) => statusCodeOf(error) === 409;

/** A one-line account of an API error: the Status message when the server sent one. */
export function apiErrorMessage(error: unknown): string {
  if (error && typeof error === "object" && "body" in error) {
    const body = (error as { body?: unknown }).body;
    try {
      const parsed =
        typeof body === "string"
          ? (JSON.parse(body) as { message?: string })
          : (body as { message?: string });
      if (parsed?.message) return `${statusCodeOf(error) ?? ""} ${parsed.message}`.trim();
    } catch {
      // not JSON: fall through to the error's own message
    }
  }
  return error instanceof Error ? (error.message.split("\n")[0] ?? error.name) : String(error);
}
