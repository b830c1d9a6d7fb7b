// `playbook cron trigger NAME`, the client's side of "run now" (issue 22): it asks for a run by
// writing a request id into the CronPlaybook's annotation playbook.dev/trigger, then waits until
// the controller answers it in status.lastTrigger: the run it started, or why it started none
// (concurrencyPolicy Forbid with a run still active).
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
/** The annotation the CLI writes; the controller answers each new value once. */
export const TRIGGER_ANNOTATION = `${GROUP}/trigger`;

const what = (verb: string, name: string) => ({ verb, resource: CRON_RESOURCE, name, kind: "CronPlaybook" });

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
      lastTrigger: z
        .looseObject({
          id: z.string(),
          run: z.string().optional(),
          skipped: z.string().optional(),
          handledAt: z.string().optional(),
        })
        .optional(),
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

/** Writes the request into the annotation (a merge patch: the rest of the object is left alone). */
export async function requestTrigger(
  cluster: Cluster,
  name: string,
  id: string,
): Promise<ClusterCronPlaybook> {
  try {
    const raw = await cluster.api.call({
      method: "PATCH",
      path: cronPlaybookPath(cluster.namespace, name),
      body: { metadata: { annotations: { [TRIGGER_ANNOTATION]: id } } },
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

/** Follows the CronPlaybook until status.lastTrigger.id is `id`, the timeout, Ctrl-C, or its deletion. */
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
        if (seen?.id === id) finish({ kind: "answered", trigger: seen });
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
 * Asks for a run and says what came of it: exit 0 with the run, 1 when the concurrency policy
 * skipped it, 3 when no answer came within the timeout (the request stays: the controller may
 * still answer it), 130 on Ctrl-C.
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
        ? `its status.lastTrigger.id is still ${answer.seen.id}`
        : "it has no status.lastTrigger";
      err.write(
        `${object}: no answer within --timeout ${timeoutText}: waited for status.lastTrigger.id ${id} (${last}); is the controller running and does it handle CronPlaybooks? The request stays in annotation ${TRIGGER_ANNOTATION}\n`,
      );
      return EXIT.lost;
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
