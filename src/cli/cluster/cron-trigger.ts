// `playbook cron trigger NAME`, the client's side of "run now" (issue 22): it asks for a run by
// writing a request id into an annotation of its own on the CronPlaybook,
// playbook.dev/trigger-<the id's 8 random hex>, so that requests made at once do not overwrite each
// other (issue 33); then it waits until the controller answers that id in status.triggers: the
// run it started, or why it started none (the concurrency policy, the namespace's policy, the API
// server refusing the run); then it removes its annotation.
import { randomBytes } from "node:crypto";
import { z } from "zod";
import { GROUP, VERSION } from "../../api/playbook.js";
import { EXIT } from "../exit-codes.js";
import { type Cluster, ClusterError, describeApiFailure } from "./connection.js";
import { watchObject } from "./playbooks.js";

// The names of src/api/cron-playbook.ts (a unit test holds them equal), not imported: that module
// brings croner and the Playbook's schemas into the cluster commands' chunk.
export const CRON_PLURAL = "cronplaybooks";
export const CRON_RESOURCE = `${CRON_PLURAL}.${GROUP}`;
/** An older CLI's one annotation; this one writes TRIGGER_ANNOTATION_PREFIX and 8 hex. */
export const TRIGGER_ANNOTATION = `${GROUP}/trigger`;
export const TRIGGER_ANNOTATION_PREFIX = `${TRIGGER_ANNOTATION}-`;

/** The request's own annotation: the prefix and the id's random part. */
export function triggerAnnotationKey(id: string): string {
  return `${TRIGGER_ANNOTATION_PREFIX}${id.slice(-8)}`;
}

const what = (verb: string, name: string) => ({ verb, resource: CRON_RESOURCE, name, kind: "CronPlaybook" });

const TriggerAnswerSchema = z.looseObject({
  id: z.string(),
  run: z.string().optional(),
  skipped: z.string().optional(),
  handledAt: z.string().optional(),
});

/** A CronPlaybook as the command reads it: its name and the controller's answer, the rest kept. */
export const ClusterCronPlaybookSchema = z.looseObject({
  metadata: z.looseObject({
    name: z.string(),
    namespace: z.string().optional(),
    uid: z.string().optional(),
    resourceVersion: z.string().optional(),
  }),
  status: z
    .looseObject({
      lastTrigger: TriggerAnswerSchema.optional(),
      triggers: z.array(TriggerAnswerSchema).optional(),
    })
    .optional(),
});
export type ClusterCronPlaybook = z.infer<typeof ClusterCronPlaybookSchema>;
export type LastTrigger = NonNullable<NonNullable<ClusterCronPlaybook["status"]>["lastTrigger"]>;

export function cronPlaybookPath(namespace: string, name?: string): string {
  const base = `/apis/${GROUP}/${VERSION}/namespaces/${encodeURIComponent(namespace)}/${CRON_PLURAL}`;
  return name === undefined ? base : `${base}/${encodeURIComponent(name)}`;
}

function parseCronPlaybook(raw: unknown, verb: string): ClusterCronPlaybook {
  const parsed = ClusterCronPlaybookSchema.safeParse(raw);
  if (!parsed.success) throw new Error(`${verb}: the API server's answer is not a CronPlaybook`);
  return parsed.data;
}

/** A request id: the time with milliseconds, then 8 random hex characters (two in one ms differ). */
export function newRequestId(
  now: Date = new Date(),
  random: () => string = () => randomBytes(4).toString("hex"),
) {
  return `${now.toISOString()}-${random()}`;
}

/**
 * Writes the request into its own annotation (a merge patch: the rest of the object, other
 * requests' annotations too, is left alone); with `remove`, takes it away.
 */
export async function requestTrigger(
  cluster: Cluster,
  name: string,
  id: string,
  remove = false,
): Promise<ClusterCronPlaybook> {
  try {
    const raw = await cluster.api.call({
      method: "PATCH",
      path: cronPlaybookPath(cluster.namespace, name),
      body: { metadata: { annotations: { [triggerAnnotationKey(id)]: remove ? null : id } } },
      contentType: "application/merge-patch+json",
    });
    return parseCronPlaybook(raw, "patch");
  } catch (error) {
    throw describeApiFailure(error, what("patch", name), cluster);
  }
}

export type TriggerAnswer =
  | { kind: "answered"; trigger: LastTrigger }
  | { kind: "timeout"; seen: LastTrigger | undefined }
  | { kind: "interrupted" }
  | { kind: "deleted" };

/** The controller's answer to `id`, if the CronPlaybook holds it. */
export function answerTo(cron: ClusterCronPlaybook, id: string): LastTrigger | undefined {
  const last = cron.status?.lastTrigger;
  return cron.status?.triggers?.find((answer) => answer.id === id) ?? (last?.id === id ? last : undefined);
}

/** Follows the CronPlaybook until it answers `id`, the timeout, Ctrl-C, or its deletion. */
export async function awaitTrigger(
  cluster: Cluster,
  name: string,
  id: string,
  timeoutMs: number | undefined,
): Promise<TriggerAnswer> {
  const stop = new AbortController();
  let answer: TriggerAnswer | undefined;
  let seen: LastTrigger | undefined;
  const finish = (result: TriggerAnswer) => {
    answer ??= result;
    stop.abort();
  };
  const timer =
    timeoutMs === undefined ? undefined : setTimeout(() => finish({ kind: "timeout", seen }), timeoutMs);
  const onInterrupt = () => finish({ kind: "interrupted" });
  process.once("SIGINT", onInterrupt);
  process.once("SIGTERM", onInterrupt);
  try {
    await watchObject(
      cluster,
      {
        path: cronPlaybookPath(cluster.namespace),
        resource: CRON_RESOURCE,
        kind: "CronPlaybook",
        parse: (raw) => parseCronPlaybook(raw, "watch"),
      },
      name,
      (object) => {
        if (object === null) return finish({ kind: "deleted" });
        seen = object.status?.lastTrigger;
        const answer = answerTo(object, id);
        if (answer) finish({ kind: "answered", trigger: answer });
      },
      stop.signal,
    );
  } finally {
    clearTimeout(timer);
    process.removeListener("SIGINT", onInterrupt);
    process.removeListener("SIGTERM", onInterrupt);
  }
  return answer ?? { kind: "deleted" };
}

/**
 * Asks for a run and says what came of it: exit 0 with the run, 1 when none was started (the
 * answer says why), 4 when no answer came within the timeout (the request stays: the controller
 * may still answer it), 130 on Ctrl-C.
 */
export async function triggerCronPlaybook(
  cluster: Cluster,
  name: string,
  timeoutMs: number | undefined,
  timeoutText: string,
  err: NodeJS.WritableStream = process.stderr,
  out: NodeJS.WritableStream = process.stdout,
): Promise<number> {
  const id = newRequestId();
  await requestTrigger(cluster, name, id);
  const answer = await awaitTrigger(cluster, name, id, timeoutMs);
  const object = `cronplaybook ${cluster.namespace}/${name}`;
  if (answer.kind === "answered") {
    // Answered: the request's annotation has done its work. Left behind (no patch right, the
    // object gone) it is harmless: the controller keeps the answer of a request still annotated.
    await requestTrigger(cluster, name, id, true).catch(() => undefined);
  }
  switch (answer.kind) {
    case "answered":
      if (answer.trigger.run) {
        out.write(`${object}: started run ${cluster.namespace}/${answer.trigger.run}\n`);
        return EXIT.succeeded;
      }
      err.write(`${object}: not started: ${answer.trigger.skipped ?? "the controller started no run"}\n`);
      return EXIT.failed;
    case "timeout": {
      const last = answer.seen
        ? `its status.lastTrigger.id is ${answer.seen.id}`
        : "it has no status.lastTrigger";
      err.write(
        `${object}: no answer within --timeout ${timeoutText}: waited for request ${id} in status.triggers (${last}); is the controller running and does it handle CronPlaybooks? The request stays in annotation ${triggerAnnotationKey(id)}\n`,
      );
      return EXIT.waitTimedOut;
    }
    case "interrupted":
      err.write(
        `${object}: stopped waiting for request ${id}; the controller may still start it (see status.lastTrigger)\n`,
      );
      return EXIT.interrupted;
    case "deleted":
      throw new ClusterError(
        `${object} was deleted while waiting for request ${id} (context ${cluster.context}, server ${cluster.server})`,
        EXIT.lost,
      );
  }
}
