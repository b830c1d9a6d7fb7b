// The API client the controller uses, made from a kubeconfig as kubectl finds one (the error facts
// it decides on are in api-errors.ts; the group, version and plural it calls, in src/api/playbook.ts).
// KubeConfig is the one value taken from client-node (the rest is types), so a bundle keeps
// only it and what it needs.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { API_CALL_TIMEOUT_MS, ApiClient } from "./api-client.js";

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
  if (file) loadFile(kubeConfig, file);
  else kubeConfig.loadFromDefault();
  if (!kubeConfig.getCurrentCluster()) {
    throw new Error("no Kubernetes cluster configured: set KUBECONFIG or run in a pod");
  }
  keepTokenFile(kubeConfig, file ? [file] : kubeconfigFiles());
  return kubeConfig;
}

/**
 * The kubeconfig these files make together, merged as kubectl merges KUBECONFIG: the first file
 * to set current-context decides it, and the first to name a cluster, user or context keeps it.
 * A file that cannot be read throws (the caller names it). `context`, when given, is the current
 * context whether or not the files have it (the caller checks).
 */
export function loadKubeConfigFiles(files: readonly string[], context?: string): KubeConfig {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({ clusters: [], users: [], contexts: [], currentContext: "" });
  for (const file of files) {
    const part = new KubeConfig();
    loadFile(part, file);
    if (!kubeConfig.getCurrentContext() && part.getCurrentContext()) {
      kubeConfig.setCurrentContext(part.getCurrentContext());
    }
    const named = (list: readonly { name: string }[], name: string) =>
      list.some((item) => item.name === name);
    for (const cluster of part.clusters)
      if (!named(kubeConfig.clusters, cluster.name)) kubeConfig.addCluster(cluster);
    for (const user of part.users) if (!named(kubeConfig.users, user.name)) kubeConfig.addUser(user);
    for (const context of part.contexts)
      if (!named(kubeConfig.contexts, context.name)) kubeConfig.addContext(context);
  }
  if (context) kubeConfig.setCurrentContext(context);
  keepTokenFile(kubeConfig, [...files]);
  return kubeConfig;
}

/** The kubeconfig files loadFromDefault reads, in their order of precedence. */
function kubeconfigFiles(): string[] {
  const fromEnv = process.env.KUBECONFIG;
  if (fromEnv) return fromEnv.split(path.delimiter).filter(Boolean);
  return [path.join(os.homedir(), ".kube", "config")];
}

/**
 * KubeConfig.loadFromFile, with a user's relative token-file taken from the kubeconfig's folder,
 * as kubectl takes every path in it: client-node reads the token-file as it loads the file, from
 * the working folder (its other paths it resolves afterwards, from the file's).
 */
function loadFile(kubeConfig: KubeConfig, file: string): void {
  const text = fs.readFileSync(file, "utf8");
  const resolved = mayNameTokenFile(text) ? withTokenFilesAbsolute(text, path.dirname(file)) : undefined;
  // As loadFromFile does, on the text already read.
  kubeConfig.loadFromString(resolved === undefined ? text : JSON.stringify(resolved));
  kubeConfig.makePathsAbsolute(path.dirname(file));
}

/** Whether a kubeconfig's text could name a token-file: the key, or an escape that could spell it. */
const mayNameTokenFile = (text: string) => text.includes("token-file") || text.includes("\\");

/**
 * The kubeconfig with its users' relative token-files made absolute from `folder`, or undefined
 * when it has none (or is not YAML: client-node says why).
 */
function withTokenFilesAbsolute(text: string, folder: string): unknown {
  let raw: unknown;
  try {
    raw = parseYaml(text, { merge: true });
  } catch {
    return undefined;
  }
  const users = RawUsersSchema.safeParse(raw).data?.users;
  const relative = (user: { user?: { "token-file"?: string | undefined } | null | undefined }) => {
    const tokenFile = user.user?.["token-file"];
    return tokenFile !== undefined && tokenFile !== "" && !path.isAbsolute(tokenFile);
  };
  if (!users?.some(relative)) return undefined;
  return {
    ...(raw as object),
    users: users.map((user) =>
      relative(user)
        ? {
            ...user,
            user: { ...user.user, "token-file": path.resolve(folder, user.user?.["token-file"] ?? "") },
          }
        : user,
    ),
  };
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
  const texts = files.map((file) => {
    try {
      return fs.readFileSync(file, "utf8");
    } catch {
      return undefined;
    }
  });
  // No file could say token-file: nothing to parse again, a few ms of every cluster command's start.
  if (!texts.some((text) => text !== undefined && mayNameTokenFile(text))) return;
  for (const [i, file] of files.entries()) {
    const text = texts[i];
    if (text === undefined) continue;
    let raw: unknown;
    try {
      raw = parseYaml(text);
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
