// The API client the controller uses, and the few error facts it decides on.
// KubeConfig is the one value taken from client-node (the rest is types), so a bundle keeps
// only it and what it needs.
import { KubeConfig } from "@kubernetes/client-node";
import { API_CALL_TIMEOUT_MS, ApiClient } from "./api-client.js";

export { API_CALL_TIMEOUT_MS };

export const GROUP = "playbook.dev";
export const VERSION = "v1alpha1";
export const PLURAL = "playbooks";

export interface KubeClients {
  kubeConfig: KubeConfig;
  api: ApiClient;
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

/**
 * A client whose every call ends by its deadline: a call on a dead connection would otherwise
 * wait forever, holding a worker or a Lease renew with it.
 */
export function makeClients(kubeConfig: KubeConfig, callTimeoutMs = API_CALL_TIMEOUT_MS): KubeClients {
  return { kubeConfig, api: new ApiClient(kubeConfig, callTimeoutMs) };
}

/** The HTTP status of a failed API call (ApiError carries it as `code`, a failed watch as `statusCode`). */
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
