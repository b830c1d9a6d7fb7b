import { accessSync, constants } from "node:fs";
import path from "node:path";
import type { V1Container, V1Pod } from "@kubernetes/client-node";

/** Maps a container's command[0] (or, without a command, its image) to a local argv prefix. */
export interface CommandMapping {
  commands: Record<string, string[]>;
  /** Image repository without tag or digest, e.g. `ghcr.io/x/playbook-controller`. */
  images: Record<string, string[]>;
}

export type Resolved = { argv: [string, ...string[]] } | { error: string };

const imageRepository = (image: string): string => image.replace(/@.*$/, "").replace(/:[^/:]*$/, "");

/** `$(VAR)` references as the kubelet expands them in env values, command and args; `$$` escapes. */
export function expandReferences(value: string, env: Record<string, string>): string {
  return value.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)/g, (match, name: string | undefined) => {
    if (match === "$$") return "$";
    return name !== undefined && name in env ? (env[name] ?? "") : match;
  });
}

function onPath(file: string, envPath: string): string | undefined {
  const candidates = file.includes("/") ? [file] : envPath.split(":").map((dir) => path.join(dir, file));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // Try the next PATH entry.
    }
  }
  return undefined;
}

/** The local argv for a container, or the error a runtime would report when it cannot start it. */
export function resolveArgv(
  container: V1Container,
  env: Record<string, string>,
  mapping: CommandMapping,
): Resolved {
  const command = (container.command ?? []).map((part) => expandReferences(part, env));
  const args = (container.args ?? []).map((part) => expandReferences(part, env));
  let argv: string[];
  if (command.length > 0) {
    const [first = "", ...rest] = command;
    argv = [...(mapping.commands[first] ?? [first]), ...rest, ...args];
  } else {
    const entrypoint = mapping.images[imageRepository(container.image ?? "")];
    if (!entrypoint) {
      return {
        error: `image ${container.image} has no entrypoint known to the process node; set the container's command or map the image`,
      };
    }
    argv = [...entrypoint, ...args];
  }
  const [file, ...rest] = argv;
  if (file === undefined || file === "") return { error: "container has an empty command" };
  const executable = onPath(file, env.PATH ?? "");
  if (!executable) return { error: `exec: "${file}": executable file not found in $PATH` };
  return { argv: [executable, ...rest] };
}

export function fieldValue(pod: V1Pod, fieldPath: string): string {
  const labelOrAnnotation = /^metadata\.(labels|annotations)\['(.+)'\]$/.exec(fieldPath);
  if (labelOrAnnotation) {
    const [, kind, key = ""] = labelOrAnnotation;
    const map = kind === "labels" ? pod.metadata?.labels : pod.metadata?.annotations;
    return map?.[key] ?? "";
  }
  const fields: Record<string, string | undefined> = {
    "metadata.name": pod.metadata?.name,
    "metadata.namespace": pod.metadata?.namespace,
    "metadata.uid": pod.metadata?.uid,
    "spec.nodeName": pod.spec?.nodeName,
    "spec.serviceAccountName": pod.spec?.serviceAccountName,
    "status.hostIP": "127.0.0.1",
    "status.podIP": "127.0.0.1",
  };
  return fields[fieldPath] ?? "";
}

export type SecretOrConfigMapReader = (
  kind: "Secret" | "ConfigMap",
  namespace: string,
  name: string,
) => Promise<Record<string, string> | undefined>;

/**
 * The container's environment: a minimal base (PATH, HOME, HOSTNAME) and then the pod's env in
 * order, with `valueFrom` field, secret and config map references resolved.
 */
export async function containerEnv(
  pod: V1Pod,
  container: V1Container,
  base: Record<string, string>,
  read: SecretOrConfigMapReader,
): Promise<Record<string, string>> {
  const env: Record<string, string> = { ...base };
  const namespace = pod.metadata?.namespace ?? "default";
  for (const source of container.envFrom ?? []) {
    const data = source.configMapRef
      ? await read("ConfigMap", namespace, source.configMapRef.name ?? "")
      : source.secretRef
        ? await read("Secret", namespace, source.secretRef.name ?? "")
        : undefined;
    for (const [key, value] of Object.entries(data ?? {})) env[`${source.prefix ?? ""}${key}`] = value;
  }
  for (const variable of container.env ?? []) {
    if (variable.value !== undefined) {
      env[variable.name] = expandReferences(variable.value, env);
    } else if (variable.valueFrom?.fieldRef) {
      env[variable.name] = fieldValue(pod, variable.valueFrom.fieldRef.fieldPath);
    } else if (variable.valueFrom?.secretKeyRef) {
      const ref = variable.valueFrom.secretKeyRef;
      const value = (await read("Secret", namespace, ref.name ?? ""))?.[ref.key];
      if (value !== undefined) env[variable.name] = value;
      else if (!ref.optional) throw new Error(`secret ${ref.name} key ${ref.key} not found`);
    } else if (variable.valueFrom?.configMapKeyRef) {
      const ref = variable.valueFrom.configMapKeyRef;
      const value = (await read("ConfigMap", namespace, ref.name ?? ""))?.[ref.key];
      if (value !== undefined) env[variable.name] = value;
      else if (!ref.optional) throw new Error(`config map ${ref.name} key ${ref.key} not found`);
    } else {
      env[variable.name] = "";
    }
  }
  return env;
}
