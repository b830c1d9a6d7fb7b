// The Playbook calls the cluster commands make: create, get, cancel, and a watch of one Playbook
// that resumes where it broke off and says when the Playbook is gone.
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import { SUCCEEDED } from "../../api/conditions.js";
import { ConditionSchema, GROUP, PLURAL, VERSION } from "../../api/playbook.js";
import { statusCodeOf } from "../../runtime/api-errors.js";
import { type Cluster, describeApiFailure } from "./connection.js";

/**
 * A Playbook as the API server has it, read leniently: what the commands decide on is typed, the
 * rest (spec, the status the watch shows) is kept as it came, so `-o json` prints it whole.
 */
export const ClusterPlaybookSchema = z.looseObject({
  metadata: z.looseObject({
    name: z.string(),
    namespace: z.string().optional(),
    uid: z.string().optional(),
    resourceVersion: z.string().optional(),
    generation: z.number().optional(),
  }),
  spec: z.looseObject({ cancel: z.boolean().optional() }).optional(),
  status: z
    .looseObject({
      phase: z.string().optional(),
      podName: z.string().optional(),
      conditions: z.array(ConditionSchema).optional(),
    })
    .optional(),
});
export type ClusterPlaybook = z.infer<typeof ClusterPlaybookSchema>;

export const RESOURCE = `${PLURAL}.${GROUP}`;

export function playbookPath(namespace: string, name?: string): string {
  const base = `/apis/${GROUP}/${VERSION}/namespaces/${encodeURIComponent(namespace)}/${PLURAL}`;
  return name === undefined ? base : `${base}/${encodeURIComponent(name)}`;
}

function parsePlaybook(raw: unknown, what: string): ClusterPlaybook {
  const parsed = ClusterPlaybookSchema.safeParse(raw);
  if (!parsed.success) throw new Error(`${what}: the API server's answer is not a Playbook`);
  return parsed.data;
}

/** Creates the Playbook (metadata.generateName honoured: the answer carries the name given). */
export async function createPlaybook(cluster: Cluster, body: object): Promise<ClusterPlaybook> {
  const name = (body as { metadata?: { name?: string; generateName?: string } }).metadata;
  try {
    const raw = await cluster.api.call({ method: "POST", path: playbookPath(cluster.namespace), body });
    return parsePlaybook(raw, "create");
  } catch (error) {
    throw describeApiFailure(
      error,
      {
        verb: "create",
        resource: PLURAL,
        name: name?.name ?? (name?.generateName ? `${name.generateName}*` : ""),
      },
      cluster,
    );
  }
}

export async function getPlaybook(cluster: Cluster, name: string): Promise<ClusterPlaybook> {
  try {
    return parsePlaybook(
      await cluster.api.call({ method: "GET", path: playbookPath(cluster.namespace, name) }),
      "get",
    );
  } catch (error) {
    throw describeApiFailure(error, { verb: "get", resource: PLURAL, name }, cluster);
  }
}

/** Sets spec.cancel (a merge patch, which the API server applies whether or not the run has started). */
export async function cancelPlaybook(cluster: Cluster, name: string): Promise<ClusterPlaybook> {
  try {
    const raw = await cluster.api.call({
      method: "PATCH",
      path: playbookPath(cluster.namespace, name),
      body: { spec: { cancel: true } },
      contentType: "application/merge-patch+json",
    });
    return parsePlaybook(raw, "patch");
  } catch (error) {
    throw describeApiFailure(error, { verb: "patch", resource: PLURAL, name }, cluster);
  }
}

/** The reason of the run's terminal Succeeded condition (True or False), undefined while it runs. */
export function terminalReason(playbook: ClusterPlaybook): string | undefined {
  const condition = playbook.status?.conditions?.find((c) => c.type === SUCCEEDED);
  if (!condition || condition.status === "Unknown") return undefined;
  // A condition from before the spec's last change (spec.cancel set) still decides: a run that
  // ended stays ended.
  return condition.reason;
}

/** The terminal condition's message, for the line a command ends with. */
export function terminalMessage(playbook: ClusterPlaybook): string {
  return playbook.status?.conditions?.find((c) => c.type === SUCCEEDED)?.message ?? "";
}

const WatchEventSchema = z.looseObject({ type: z.string(), object: z.unknown() });
const ListSchema = z.looseObject({
  metadata: z.looseObject({ resourceVersion: z.string().optional() }).optional(),
  items: z.array(z.unknown()).nullish(),
});

/** How long a watch may fail to reconnect before the command gives up (the cluster is unreachable). */
export const WATCH_GIVE_UP_MS = 60_000;

/**
 * Follows one Playbook: `onObject` gets it as listed and on every change, and null once it is
 * gone (deleted, or replaced by another of the same name), after which the watch ends. A watch
 * that breaks is resumed from the last resourceVersion, a list taken again when that is too old
 * (410). Resolves when the signal aborts or the Playbook is gone; rejects with a ClusterError when
 * the API server refuses (RBAC) or cannot be reached for `giveUpMs`.
 */
export function watchPlaybook(
  cluster: Cluster,
  name: string,
  onObject: (playbook: ClusterPlaybook | null) => void,
  signal: AbortSignal,
  giveUpMs = WATCH_GIVE_UP_MS,
): Promise<void> {
  return watchObject(
    cluster,
    { path: playbookPath(cluster.namespace), resource: PLURAL, parse: (raw) => parsePlaybook(raw, "watch") },
    name,
    onObject,
    signal,
    giveUpMs,
  );
}

/** What watchObject follows: the collection's path, its resource (for messages), and its parser. */
export interface WatchedResource<T> {
  path: string;
  resource: string;
  kind?: string;
  parse: (raw: unknown) => T;
}

/** watchPlaybook's loop, for any namespaced object with a name, uid and resourceVersion. */
export async function watchObject<T extends { metadata: { uid?: string; resourceVersion?: string } }>(
  cluster: Cluster,
  watched: WatchedResource<T>,
  name: string,
  onObject: (object: T | null) => void,
  signal: AbortSignal,
  giveUpMs = WATCH_GIVE_UP_MS,
): Promise<void> {
  const { path } = watched;
  const failure = (error: unknown, verb: string) =>
    describeApiFailure(
      error,
      { verb, resource: watched.resource, name, ...(watched.kind ? { kind: watched.kind } : {}) },
      cluster,
    );
  const fieldSelector = `metadata.name=${name}`;
  let uid: string | undefined;
  let resourceVersion: string | undefined;
  let gone = false;
  let failingSince: number | undefined;
  let backoffMs = 250;
  const seen = (raw: unknown) => {
    const object = watched.parse(raw);
    if (uid !== undefined && object.metadata.uid !== uid) {
      gone = true;
      onObject(null);
      return;
    }
    uid = object.metadata.uid;
    resourceVersion = object.metadata.resourceVersion ?? resourceVersion;
    onObject(object);
  };
  let verb = "list";
  let listed = false;
  while (!signal.aborted && !gone) {
    try {
      if (resourceVersion === undefined) {
        verb = "list";
        const list = ListSchema.parse(
          await cluster.api.call({ method: "GET", path, query: { fieldSelector }, options: { signal } }),
        );
        const item = list.items?.[0];
        resourceVersion = list.metadata?.resourceVersion;
        if (item === undefined) {
          gone = true;
          onObject(null);
          return;
        }
        listed = true;
        seen(item);
        if (gone || signal.aborted) return;
      }
      verb = "watch";
      // Ended from inside a line's handler: an expired resourceVersion, the Playbook gone.
      const attempt = new AbortController();
      let expired = false;
      const handleLine = (line: string) => {
        const event = WatchEventSchema.parse(JSON.parse(line));
        if (event.type === "ERROR") {
          // 410 Gone: the resourceVersion is too old; list again.
          expired = true;
          attempt.abort();
        } else if (event.type === "BOOKMARK") {
          const version = ClusterPlaybookSchema.shape.metadata.safeParse(
            (event.object as { metadata?: unknown } | null)?.metadata,
          ).data?.resourceVersion;
          if (version) resourceVersion = version;
        } else if (event.type === "DELETED") {
          gone = true;
          onObject(null);
        } else {
          seen(event.object);
        }
        if (gone) attempt.abort();
      };
      await cluster.api
        .watch(
          path,
          { fieldSelector, resourceVersion, allowWatchBookmarks: true },
          {
            onOpen: () => {
              failingSince = undefined;
              backoffMs = 250;
            },
            onLine: (line) => {
              if (gone || expired || line.trim() === "") return;
              try {
                handleLine(line);
              } catch {
                // A line that is not an event: list again rather than trust what follows.
                expired = true;
                attempt.abort();
              }
            },
          },
          { signal: AbortSignal.any([signal, attempt.signal]) },
        )
        .catch((error: unknown) => {
          if (!attempt.signal.aborted) throw error;
        });
      if (expired) resourceVersion = undefined;
    } catch (error) {
      if (signal.aborted || gone) return;
      if (statusCodeOf(error) === 410) {
        resourceVersion = undefined;
        continue;
      }
      const code = statusCodeOf(error);
      // The API server refused the list or the watch itself: waiting will not change its mind.
      // So does a cluster that cannot be reached at all: only a watch that was going is retried.
      if ((code !== undefined && code >= 400 && code < 500 && code !== 429) || !listed) {
        throw failure(error, verb);
      }
      failingSince ??= Date.now();
      if (Date.now() - failingSince > giveUpMs) {
        throw failure(error, verb);
      }
      await sleep(backoffMs * (0.5 + Math.random()), undefined, { signal }).catch(() => undefined);
      backoffMs = Math.min(backoffMs * 2, 5_000);
    }
  }
}
