// The API client the controller uses, and the few error facts it decides on. The group, version
// and plural it calls are the API's own (src/api/playbook.ts).
// KubeConfig is the one value taken from client-node (the rest is types), so a bundle keeps
// only it and what it needs.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { API_CALL_TIMEOUT_MS, ApiClient, ApiError } from "./api-client.js";

export { API_CALL_TIMEOUT_MS };

export interface KubeClients {
  kubeConfig: KubeConfig;
  api: ApiClient;
}

/**
 * KUBECONFIG, then ~/.kube/config, then the in-cluster service account, as kubectl does (or the
 * kubeconfig file given). A user's `token-file` is kept as a file to read again when it changes
 * (client-node reads it once, at load), as the in-cluster token is.
 */
export function loadKubeConfig(file?: string): KubeConfig {
  const kubeConfig = new KubeConfig();
  if (file) kubeConfig.loadFromFile(file);
  else kubeConfig.loadFromDefault();
  if (!kubeConfig.getCurrentCluster()) {
    throw new Error("no Kubernetes cluster configured: set KUBECONFIG or run in a pod");
  }
  keepTokenFile(kubeConfig, file ? [file] : kubeconfigFiles());
  return kubeConfig;
}

/** The kubeconfig files loadFromDefault reads, in their order of precedence. */
function kubeconfigFiles(): string[] {
  const fromEnv = process.env.KUBECONFIG;
  if (fromEnv) return fromEnv.split(path.delimiter).filter(Boolean);
  return [path.join(os.homedir(), ".kube", "config")];
}

const RawUsersSchema = z.looseObject({
  users: z
    .array(
      z.looseObject({
        name: z.string(),
        user: z.looseObject({ "token-file": z.string().optional(), token: z.string().optional() }).nullish(),
      }),
    )
    .nullish(),
});

/** Turns the current user's `token-file` into client-node's token file provider (its in-cluster shape). */
function keepTokenFile(kubeConfig: KubeConfig, files: string[]): void {
  const user = kubeConfig.getCurrentUser();
  if (!user || user.authProvider || user.exec) return;
  for (const file of files) {
    let raw: unknown;
    try {
      raw = parseYaml(fs.readFileSync(file, "utf8"));
    } catch {
      continue;
    }
    const entry = RawUsersSchema.safeParse(raw).data?.users?.find(
      (candidate) => candidate.name === user.name,
    );
    if (!entry) continue;
    // The first file naming the user decides, as kubectl merges them; a token wins over its file.
    const tokenFile = entry.user?.["token-file"];
    if (!tokenFile || entry.user?.token) return;
    const absolute = path.resolve(path.dirname(file), tokenFile);
    Object.assign(user, {
      token: undefined,
      authProvider: { name: "tokenFile", config: { tokenFile: absolute } },
    });
    return;
  }
}

/**
 * A client whose every call ends by its deadline: a call on a dead connection would otherwise
 * wait forever, holding a worker or a Lease renew with it.
 */
export function makeClients(kubeConfig: KubeConfig, callTimeoutMs = API_CALL_TIMEOUT_MS): KubeClients {
  return { kubeConfig, api: new ApiClient(kubeConfig, callTimeoutMs) };
}

/**
 * The HTTP status the API server answered a failed call with: ApiError's numeric `code` (a
 * network error's `code` is a string such as ECONNREFUSED).
 */
export function statusCodeOf(error: unknown): number | undefined {
  const code = error && typeof error === "object" ? (error as { code?: unknown }).code : undefined;
  return typeof code === "number" ? code : undefined;
}

export const isNotFound = (error: unknown) => statusCodeOf(error) === 404;
export const isConflict = (error: unknown) => statusCodeOf(error) === 409;

const StatusMessageSchema = z.looseObject({ message: z.string().min(1) });

/**
 * A one-line account of a failure for logs and status messages: the status code and the Status
 * message when the API server sent one, otherwise the first line of the error's message.
 */
export function apiErrorMessage(error: unknown): string {
  if (error instanceof ApiError) {
    const status = StatusMessageSchema.safeParse(error.body);
    if (status.success) return `${error.code} ${status.data.message}`;
  }
  return error instanceof Error ? (error.message.split("\n")[0] ?? error.name) : String(error);
}
