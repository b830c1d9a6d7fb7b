// The API clients the controller uses, and the few error facts it decides on.
import { CoordinationV1Api, CoreV1Api, CustomObjectsApi, KubeConfig } from "@kubernetes/client-node";

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

export function makeClients(kubeConfig: KubeConfig): KubeClients {
  return {
    kubeConfig,
    core: kubeConfig.makeApiClient(CoreV1Api),
    custom: kubeConfig.makeApiClient(CustomObjectsApi),
    coordination: kubeConfig.makeApiClient(CoordinationV1Api),
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
