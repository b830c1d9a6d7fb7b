// `playbook run --secret NAME=DIR --config-map NAME=DIR`: a local run's Secrets and ConfigMaps,
// one file per key as a mounted Secret shows them (docs/secrets.md). Each task's env from sources
// (valueFrom, envFrom) is resolved here into the tasks the runner runs, never into the Playbook
// printed with -o; the Secrets' values go to the runner to print as ***. A reference with no
// source, or a key not in its folder, ends the run before its first task, naming each one.
import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import type { PlaybookSpec, TaskSpec } from "../api/playbook.js";
import { allTasksOf } from "../api/task-images.js";
import { UsageError } from "./failure-message.js";

/** A key as the API server takes it: what a folder's file must be named to be one. */
const KEY = /^[-._a-zA-Z0-9]+$/;
/** Values are read up to this size, as a Secret holds at most 1 MiB. */
const MAX_VALUE_BYTES = 1024 * 1024;

export type SourceFolders = ReadonlyMap<string, string>;

/** --secret/--config-map values, NAME=DIR each, checked before anything runs. */
export function sourceFolders(
  flag: "--secret" | "--config-map",
  values: readonly string[],
): Map<string, string> {
  const folders = new Map<string, string>();
  for (const value of values) {
    const at = value.indexOf("=");
    const name = value.slice(0, at);
    const dir = value.slice(at + 1);
    if (at <= 0 || dir === "") throw new UsageError(`${flag} ${value}: must be NAME=DIR`);
    let isDir = false;
    try {
      isDir = statSync(dir).isDirectory();
    } catch {
      // reported below
    }
    if (!isDir) throw new UsageError(`${flag} ${value}: ${dir} is not a folder; nothing was run`);
    folders.set(name, dir);
  }
  return folders;
}

/** Every key of a folder: its regular files named as keys, as a mounted Secret or ConfigMap shows them. */
function keysOf(dir: string): Map<string, string> {
  const keys = new Map<string, string>();
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (!entry.isFile() || !KEY.test(entry.name)) continue;
    const file = path.join(dir, entry.name);
    if (statSync(file).size > MAX_VALUE_BYTES) continue;
    keys.set(entry.name, readFileSync(file, "utf8"));
  }
  return keys;
}

export interface LocalSources {
  tasks: TaskSpec[];
  finally: TaskSpec[];
  /** Every value read from a --secret folder: the runner prints each as *** */
  maskValues: string[];
}

/** The tasks with their env from sources resolved; throws UsageError naming every missing one. */
export function resolveLocalSources(
  spec: PlaybookSpec,
  run: { name: string; namespace: string },
  secrets: SourceFolders,
  configMaps: SourceFolders,
): LocalSources {
  const missing: string[] = [];
  const maskValues = new Set<string>();
  const read = new Map<string, Map<string, string>>();
  const folder = (kind: "Secret" | "ConfigMap", name: string, optional: boolean, field: string) => {
    const dir = (kind === "Secret" ? secrets : configMaps).get(name);
    if (dir === undefined) {
      if (!optional)
        missing.push(
          `${field}: ${kind} ${name} (give it with ${kind === "Secret" ? "--secret" : "--config-map"} ${name}=DIR)`,
        );
      return undefined;
    }
    let keys = read.get(`${kind}/${name}`);
    if (!keys) {
      keys = keysOf(dir);
      read.set(`${kind}/${name}`, keys);
      if (kind === "Secret") for (const value of keys.values()) maskValues.add(value);
    }
    return keys;
  };
  const resolveTask = (task: TaskSpec, field: string): TaskSpec => {
    const fromSources: { name: string; value: string }[] = [];
    (task.envFrom ?? []).forEach((from, index) => {
      const ref = from.secretRef ?? from.configMapRef;
      if (!ref) return;
      const keys = folder(
        from.secretRef ? "Secret" : "ConfigMap",
        ref.name,
        ref.optional === true,
        `${field}.envFrom[${index}]`,
      );
      for (const [key, value] of keys ?? []) fromSources.push({ name: `${from.prefix ?? ""}${key}`, value });
    });
    const env = task.env.flatMap((entry, index) => {
      const source = entry.valueFrom;
      if (!source) return [entry];
      const at = `${field}.env[${index}].valueFrom`;
      if (source.fieldRef) {
        const value =
          source.fieldRef.fieldPath === "metadata.name"
            ? run.name
            : source.fieldRef.fieldPath === "metadata.namespace"
              ? run.namespace
              : "";
        return [{ name: entry.name, value }];
      }
      const ref = source.secretKeyRef ?? source.configMapKeyRef;
      if (!ref) return [];
      const kind = source.secretKeyRef ? "Secret" : "ConfigMap";
      const keys = folder(kind, ref.name, ref.optional === true, at);
      const value = keys?.get(ref.key);
      if (keys && value === undefined && ref.optional !== true)
        missing.push(
          `${at}: key ${ref.key} is not in ${kind} ${ref.name} (${(kind === "Secret" ? secrets : configMaps).get(ref.name)})`,
        );
      return value === undefined ? [] : [{ name: entry.name, value }];
    });
    (task.volumeMounts ?? []).forEach((mount, index) => {
      missing.push(
        `${field}.volumeMounts[${index}]: playbook run does not mount volumes (${mount.name} at ${mount.mountPath}); read the folder given with --secret or --config-map instead`,
      );
    });
    // As in a Pod, env wins over envFrom.
    const { envFrom: _resolved, ...rest } = task;
    return { ...rest, env: [...fromSources.filter((e) => !env.some((own) => own.name === e.name)), ...env] };
  };
  const resolved = allTasksOf(spec).map(({ task, path: [list, index] }) =>
    resolveTask(task, `spec.${list}[${index}]`),
  );
  if (missing.length > 0) {
    throw new UsageError(`the run names what it was not given, so nothing was run: ${missing.join("; ")}`);
  }
  return {
    tasks: resolved.slice(0, spec.tasks.length),
    finally: resolved.slice(spec.tasks.length),
    // The runner's mask leaves out what is too short to mask (secret-mask.ts).
    maskValues: [...maskValues],
  };
}

/** `playbook run`'s --secret and --config-map values resolved for a Playbook's run. */
export function localSources(
  playbook: { metadata: { name: string; namespace?: string | undefined }; spec: PlaybookSpec },
  secret: readonly string[],
  configMap: readonly string[],
): LocalSources {
  const run = { name: playbook.metadata.name, namespace: playbook.metadata.namespace ?? "default" };
  return resolveLocalSources(
    playbook.spec,
    run,
    sourceFolders("--secret", secret),
    sourceFolders("--config-map", configMap),
  );
}
