// The scheduling decision for one CronPlaybook, a pure function of what the caches show (the
// CronPlaybook, its runs, the namespace's rules) and `now`: which run to create, which runs to
// cancel (Replace) or delete (history), the status to write and the events to record. The
// CronPlaybook controller (cron-controller.ts) applies it with the CronWriter.
import { isDeepStrictEqual } from "node:util";
import { type ConditionInput, setCondition } from "../../api/conditions.js";
import {
  ANNOTATION_SCHEDULED_AT,
  ANNOTATION_TRIGGERED_BY,
  CRON_KIND,
  CRON_READY,
  CRON_REASONS,
  CRON_STALE,
  type CronPlaybookSpec,
  CronPlaybookSpecSchema,
  type CronPlaybookStatus,
  LABEL_CRON_PLAYBOOK,
  type LastTrigger,
  manualRunName,
  scheduledRunName,
} from "../../api/cron-playbook.js";
import { dueTimes, readSchedule, type Schedule } from "../../api/cron-schedule.js";
import { formatDuration, parseDuration } from "../../api/duration.js";
import { zodProblems } from "../../api/manifest.js";
import { ANNOTATION_CANCEL_REASON, API_VERSION, KIND } from "../../api/playbook.js";
import type { NamespaceRules } from "../../api/policy.js";
import { escapeControls } from "../../api/visible-text.js";
import type { RecordedEvent } from "../../runtime/events.js";
import type { ReconcileSettings } from "../decision.js";
import type { OwnedMetadata, StoredPlaybook } from "../objects.js";
import { rulesOf, validateSpec } from "../run-plan.js";
import { isFinished } from "../status.js";
import { chooseStarts, passedOverText } from "./cron-concurrency.js";
import { rfc3339, type StoredCronPlaybook, scheduledAtOf } from "./cron-objects.js";
import { keptAnswers, pendingTriggers, requestedTriggers } from "./cron-triggers.js";

export interface CronInput {
  cron: StoredCronPlaybook;
  /** Its runs (labelled with its name and controlled by it), from the cache. */
  runs: readonly StoredPlaybook[];
  now: Date;
  settings: ReconcileSettings;
  /** What governs the namespace: its PlaybookPolicy named default, else the controller's flags. */
  rules?: NamespaceRules;
}

/** A run's Playbook as it is created. */
export interface RunManifest {
  apiVersion: string;
  kind: string;
  metadata: OwnedMetadata;
  spec: unknown;
}

export interface RunToCreate {
  manifest: RunManifest;
  trigger: "schedule" | "manual";
  /** The scheduled time (for a manual run, when the controller handled it). */
  scheduledAt: Date;
  /**
   * RunStarted, posted by whoever creates the run, as it creates it: not with the status, which
   * another controller may have written first (the run is then in the next pass's observed state,
   * and no pass would announce it).
   */
  started: RecordedEvent;
  /** A manual run's request id: a refused create turns its answer into "skipped". */
  triggerId?: string;
}

/** A run cancelled by Replace. */
export interface RunToCancel {
  name: string;
  /** spec.cancel's reason (annotation playbook.dev/cancel-reason), naming the run that replaces it. */
  reason: string;
  replacedBy: string;
  /** RunReplaced, posted once the cancel is written. */
  event: RecordedEvent;
}

export interface CronDecision {
  /** The status to write, or null when it would not change. */
  status: CronPlaybookStatus | null;
  create: RunToCreate[];
  /**
   * Runs to cancel (Replace): spec.cancel with a reason naming the run that replaced them, once
   * the API server has accepted that run (a dry run), so a refused create leaves them running.
   */
  cancel: RunToCancel[];
  /** Finished runs past the history limits, oldest first. */
  delete: string[];
  events: RecordedEvent[];
  /** What the metrics count: times skipped by Forbid, runs replaced, times missed. */
  counts: { skipped: number; replaced: number; missed: number };
  /** When time alone changes the answer: the next scheduled time, or when the CronPlaybook turns stale. */
  requeueAfterMs?: number;
}

/** How far past its time a pass wakes, so that the time has come by every clock's reading. */
const WAKE_SLACK_MS = 100;

export function decideCron(input: CronInput): CronDecision {
  const { cron, now } = input;
  const previous = cron.status ?? {};
  const decision: CronDecision = {
    status: null,
    create: [],
    cancel: [],
    delete: [],
    events: [],
    counts: { skipped: 0, replaced: 0, missed: 0 },
  };
  const generation = cron.metadata.generation;
  const status: CronPlaybookStatus = { ...previous };
  const runs = input.runs.filter((run) => !run.metadata.deletionTimestamp);
  const finished = runs.filter((run) => isFinished(run.status));
  const active = runs.filter((run) => !isFinished(run.status));
  const lastSuccess = latestSuccess(finished, previous.lastSuccessfulTime);
  if (lastSuccess) status.lastSuccessfulTime = lastSuccess;

  const read = readSpec(cron, input);
  const ready = readyCondition(read);
  status.conditions = setCondition(status.conditions ?? [], ready, now, generation);
  const readyBefore = previous.conditions?.find((c) => c.type === CRON_READY);
  // setCondition keeps the message with its control characters escaped: compared as kept.
  if (ready.status === "False" && readyBefore?.message !== escapeControls(ready.message)) {
    decision.events.push({ type: "Warning", reason: ready.reason, message: ready.message });
  }

  const names = new Set(input.runs.map((run) => run.metadata.name));
  const starts: Start[] = [];
  const answers: LastTrigger[] = [];
  // "Run now": each request not answered yet, in the order they were asked for.
  const requested = requestedTriggers(cron.metadata.annotations);
  for (const id of pendingTriggers(requested, previous)) {
    const handled = decideTrigger(input, id, read, names, decision);
    if ("answer" in handled) answers.push(handled.answer);
    else starts.push(handled);
  }

  if (read.ok) {
    const scheduled = decideSchedule(input, read, names, decision);
    if (scheduled.start) starts.push(scheduled.start);
    applyConcurrency(input, read.spec, active, starts, decision, answers);
    if (scheduled.latest) status.lastScheduleTime = rfc3339(scheduled.latest);
    status.missedRuns = (previous.missedRuns ?? 0) + decision.counts.missed;
    const stale = decideStale(cron, read.spec, status.lastSuccessfulTime, now);
    status.conditions = stale.condition
      ? setCondition(status.conditions, stale.condition, now, generation)
      : status.conditions.filter((c) => c.type !== CRON_STALE);
    decision.requeueAfterMs = earliest(nextWake(read.schedule, read.spec, now), stale.changesInMs);
    decision.delete = pastHistory(finished, read.spec);
  }

  if (answers.length > 0) {
    status.lastTrigger = answers[answers.length - 1];
    const before = previous.triggers ?? [];
    const last = previous.lastTrigger;
    const known = last && !before.some((answer) => answer.id === last.id) ? [last, ...before] : before;
    status.triggers = keptAnswers(known, answers, requested);
  }

  status.active = active
    .filter((run) => !decision.delete.includes(run.metadata.name))
    .sort((a, b) => scheduledAtOf(a) - scheduledAtOf(b) || a.metadata.name.localeCompare(b.metadata.name))
    .map((run) => ({ name: run.metadata.name }));
  if (generation !== undefined) status.observedGeneration = generation;
  decision.status = isDeepStrictEqual(withoutUndefined(status), withoutUndefined(previous)) ? null : status;
  return decision;
}

type SpecRead =
  | {
      ok: true;
      spec: CronPlaybookSpec;
      schedule: Schedule;
      /** The template as the namespace's rules see it: refused, or allowed (undefined). */
      refused: { reason: string; message: string } | undefined;
    }
  | { ok: false; reason: string; message: string };

/** Ready: False naming the field and value that refuses the spec or the template, else True. */
function readyCondition(read: SpecRead): ConditionInput {
  if (!read.ok) return { type: CRON_READY, status: "False", reason: read.reason, message: read.message };
  if (read.refused) return { type: CRON_READY, status: "False", ...read.refused };
  const { spec } = read;
  return {
    type: CRON_READY,
    status: "True",
    reason: CRON_REASONS.ready,
    message: spec.suspend
      ? "suspended (spec.suspend): no scheduled run starts; a trigger still does"
      : `the schedule ${JSON.stringify(spec.schedule)} in ${spec.timeZone} is read and the template is allowed`,
  };
}

/** The spec, its schedule and its template under the namespace's rules, or what refuses it. */
function readSpec(cron: StoredCronPlaybook, input: CronInput): SpecRead {
  const parsed = CronPlaybookSpecSchema.safeParse(cron.spec);
  if (!parsed.success) {
    const problems = zodProblems(parsed.error, cron.spec);
    const first = problems[0]?.path ?? "";
    const reason = first.startsWith("schedule")
      ? CRON_REASONS.invalidSchedule
      : first.startsWith("timeZone")
        ? CRON_REASONS.invalidTimeZone
        : CRON_REASONS.invalidTemplate;
    return { ok: false, reason, message: problems.map((p) => `spec.${p.path}: ${p.message}`).join("; ") };
  }
  const read = readSchedule(parsed.data.schedule, parsed.data.timeZone);
  if (!read.ok) {
    return {
      ok: false,
      reason: read.field === "schedule" ? CRON_REASONS.invalidSchedule : CRON_REASONS.invalidTimeZone,
      message: `spec.${read.field}: ${read.message}`,
    };
  }
  return { ok: true, spec: parsed.data, schedule: read.schedule, refused: templateRefusal(cron, input) };
}

/**
 * The template checked as a run of it would be, against the namespace's rules (its maximums and
 * allowlists), the message naming the template's field and value.
 */
export function templateRefusal(
  cron: StoredCronPlaybook,
  input: Pick<CronInput, "settings" | "rules">,
): { reason: string; message: string } | undefined {
  const template = (cron.spec as { template?: { spec?: unknown } } | undefined)?.template;
  const validated = validateSpec(
    {
      apiVersion: API_VERSION,
      kind: KIND,
      metadata: { name: cron.metadata.name, namespace: cron.metadata.namespace },
      spec: template?.spec,
    },
    input.settings.defaults,
    rulesOf(input),
    true,
  );
  if (validated.ok) return undefined;
  const message = validated.message.replace(/(^|; )spec\./g, "$1spec.template.spec.");
  return validated.policyRefusals
    ? {
        reason: CRON_REASONS.policyViolation,
        message: `the namespace's policy refuses the template: ${message}`,
      }
    : { reason: CRON_REASONS.invalidTemplate, message };
}

/** A run this pass would start, before the concurrency policy chooses among them. */
interface Start {
  run: RunToCreate;
  /** A trigger's request id (its answer names the run, or why none started). */
  triggerId?: string;
  /** A scheduled time, as its events name it. */
  at?: string;
}

/** A manual trigger: a run now, whether or not suspended; or its answer at once. */
function decideTrigger(
  input: CronInput,
  id: string,
  read: SpecRead,
  names: Set<string>,
  decision: CronDecision,
): Start | { answer: LastTrigger } {
  const { cron, now } = input;
  const handledAt = rfc3339(now);
  const name = manualRunName(cron.metadata.name, id);
  if (names.has(name)) return { answer: { id, run: name, handledAt } };
  if (!read.ok) return { answer: skipTrigger(id, read.message, handledAt, decision) };
  if (read.refused) return { answer: skipTrigger(id, read.refused.message, handledAt, decision) };
  return {
    triggerId: id,
    run: {
      manifest: runManifest(cron, read.spec, name, now, { [ANNOTATION_TRIGGERED_BY]: id }),
      trigger: "manual",
      scheduledAt: now,
      started: { type: "Normal", reason: "RunStarted", message: `Created run ${name} for trigger ${id}` },
      triggerId: id,
    },
  };
}

function skipTrigger(id: string, skipped: string, handledAt: string, decision: CronDecision): LastTrigger {
  decision.events.push({
    type: "Warning",
    reason: "TriggerSkipped",
    message: `Started no run for trigger ${id}: ${skipped}`,
  });
  return { id, skipped, handledAt };
}

/**
 * The concurrency policy over this pass's starts: what is created, what is cancelled (Replace),
 * and what is passed over, each passed-over start saying which run it gave way to.
 */
function applyConcurrency(
  input: CronInput,
  spec: CronPlaybookSpec,
  active: StoredPlaybook[],
  starts: Start[],
  decision: CronDecision,
  answers: LastTrigger[],
): void {
  const handledAt = rfc3339(input.now);
  const choice = chooseStarts(
    spec.concurrencyPolicy,
    active,
    starts,
    (start) => start.run.manifest.metadata.name,
  );
  for (const { start, why } of choice.passOver) {
    decision.counts.skipped++;
    if (start.triggerId !== undefined) {
      answers.push(skipTrigger(start.triggerId, passedOverText(why), handledAt, decision));
      continue;
    }
    const text =
      why.policy === "Forbid"
        ? `concurrencyPolicy Forbid and run ${why.runs}${why.samePass ? ", started in the same pass," : ""} has not finished`
        : `concurrencyPolicy Replace and run ${why.runs}, started in the same pass, replaces it`;
    decision.events.push({
      type: "Normal",
      reason: "RunSkipped",
      message: `Skipped the run scheduled at ${start.at}: ${text}`,
    });
  }
  if (choice.replace) replace(input.cron.metadata.name, choice.replace.runs, choice.replace.by.run, decision);
  for (const start of choice.start) {
    decision.create.push(start.run);
    active.push({ ...start.run.manifest, metadata: { ...start.run.manifest.metadata } });
    if (start.triggerId !== undefined)
      answers.push({ id: start.triggerId, run: start.run.manifest.metadata.name, handledAt });
  }
}

/**
 * The scheduled times since the last one handled: the latest would start (within the starting
 * deadline; the concurrency policy decides after), the others are missed. Returns the latest
 * time handled.
 */
function decideSchedule(
  input: CronInput,
  read: Extract<SpecRead, { ok: true }>,
  names: Set<string>,
  decision: CronDecision,
): { latest?: Date; start?: Start } {
  const { cron, now } = input;
  const { spec, schedule, refused } = read;
  const since = sinceOf(cron);
  const due = dueTimes(schedule, since, now);
  if (!due.latest) return {};
  const latest = due.latest;
  const at = rfc3339(latest);
  // Times that pass while suspended are passed over: resuming starts with the next one.
  if (spec.suspend) return { latest };
  const name = scheduledRunName(cron.metadata.name, latest);
  let missed = due.count - 1;
  const lateMs = now.getTime() - latest.getTime();
  const late = spec.startingDeadlineSeconds !== undefined && lateMs > spec.startingDeadlineSeconds * 1000;
  if (late && !names.has(name)) missed++;
  if (missed > 0) {
    decision.counts.missed = missed;
    const counted = due.capped ? `at least ${missed}` : `${missed}`;
    const which = late
      ? `the latest, ${at}, ${formatDuration(lateMs)} late, past startingDeadlineSeconds ${spec.startingDeadlineSeconds}`
      : `before ${at}, which starts`;
    decision.events.push({
      type: "Warning",
      reason: "MissedSchedule",
      message: `Missed ${counted} scheduled time${missed === 1 ? "" : "s"} since ${rfc3339(since)} (${which})`,
    });
  }
  if (late || names.has(name)) return { latest };
  if (refused) {
    decision.events.push({
      type: "Warning",
      reason: "RunSkipped",
      message: `Skipped the run scheduled at ${at}: ${refused.message}`,
    });
    return { latest };
  }
  return {
    latest,
    start: {
      at,
      run: {
        manifest: runManifest(cron, spec, name, latest, {}),
        trigger: "schedule",
        scheduledAt: latest,
        started: { type: "Normal", reason: "RunStarted", message: `Created run ${name} scheduled at ${at}` },
      },
    },
  };
}

/**
 * Replace: every active run not cancelled yet is cancelled, the reason naming the run that
 * replaces it. The writer cancels only once the API server has accepted the replacement.
 */
function replace(
  cronName: string,
  active: StoredPlaybook[],
  replacement: RunToCreate,
  decision: CronDecision,
): void {
  const name = replacement.manifest.metadata.name;
  for (const run of active) {
    const spec = run.spec as { cancel?: unknown } | undefined;
    if (spec?.cancel === true || decision.cancel.some((c) => c.name === run.metadata.name)) continue;
    decision.cancel.push({
      name: run.metadata.name,
      reason: `replaced by run ${name} (CronPlaybook ${cronName}, concurrencyPolicy Replace)`,
      replacedBy: name,
      event: {
        type: "Normal",
        reason: "RunReplaced",
        message: `Cancelled run ${run.metadata.name}: concurrencyPolicy Replace, run ${name} replaces it`,
      },
    });
    decision.counts.replaced++;
  }
}

function runManifest(
  cron: StoredCronPlaybook,
  spec: CronPlaybookSpec,
  name: string,
  scheduledAt: Date,
  annotations: Record<string, string>,
): RunManifest {
  const raw = (cron.spec as { template: { spec: unknown } }).template.spec;
  const { labels = {}, annotations: templateAnnotations = {} } = spec.template.metadata ?? {};
  const { [ANNOTATION_CANCEL_REASON]: _never, ...kept } = templateAnnotations;
  return {
    apiVersion: API_VERSION,
    kind: KIND,
    metadata: {
      name,
      namespace: cron.metadata.namespace ?? "",
      labels: { ...labels, [LABEL_CRON_PLAYBOOK]: cron.metadata.name },
      annotations: { ...kept, ...annotations, [ANNOTATION_SCHEDULED_AT]: rfc3339(scheduledAt) },
      ownerReferences: [
        {
          apiVersion: cron.apiVersion,
          kind: CRON_KIND,
          name: cron.metadata.name,
          uid: cron.metadata.uid ?? "",
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    spec: raw,
  };
}

/** Where the scheduled times are counted from: the last one handled, else the creation. */
function sinceOf(cron: StoredCronPlaybook): Date {
  const last = Date.parse(cron.status?.lastScheduleTime ?? "");
  if (!Number.isNaN(last)) return new Date(last);
  const created = Date.parse(cron.metadata.creationTimestamp ?? "");
  return new Date(Number.isNaN(created) ? 0 : created);
}

function latestSuccess(finished: StoredPlaybook[], recorded: string | undefined): string | undefined {
  let best = Date.parse(recorded ?? "");
  let text = Number.isNaN(best) ? undefined : recorded;
  for (const run of finished) {
    const succeeded = run.status?.conditions?.find((c) => c.type === "Succeeded")?.status === "True";
    const at = Date.parse(run.status?.completionTime ?? "");
    if (succeeded && !Number.isNaN(at) && (Number.isNaN(best) || at > best)) {
      best = at;
      text = rfc3339(new Date(at));
    }
  }
  return text;
}

/** Finished runs past the history limits, succeeded and otherwise apart, oldest first. */
function pastHistory(finished: StoredPlaybook[], spec: CronPlaybookSpec): string[] {
  const byAge = [...finished].sort(
    (a, b) => scheduledAtOf(a) - scheduledAtOf(b) || a.metadata.name.localeCompare(b.metadata.name),
  );
  const succeeded = byAge.filter(
    (run) => run.status?.conditions?.find((c) => c.type === "Succeeded")?.status === "True",
  );
  const other = byAge.filter((run) => !succeeded.includes(run));
  const over = (list: StoredPlaybook[], limit: number) => list.slice(0, Math.max(0, list.length - limit));
  return [
    ...over(succeeded, spec.successfulRunsHistoryLimit),
    ...over(other, spec.failedRunsHistoryLimit),
  ].map((run) => run.metadata.name);
}

function decideStale(
  cron: StoredCronPlaybook,
  spec: CronPlaybookSpec,
  lastSuccessfulTime: string | undefined,
  now: Date,
): {
  condition?: { type: string; status: "True" | "False"; reason: string; message: string };
  changesInMs?: number;
} {
  if (spec.staleAfter === undefined) return {};
  const bound = parseDuration(spec.staleAfter);
  const success = Date.parse(lastSuccessfulTime ?? "");
  const since = Number.isNaN(success) ? Date.parse(cron.metadata.creationTimestamp ?? "") : success;
  if (Number.isNaN(since)) return {};
  const what = Number.isNaN(success)
    ? `no run has succeeded since the CronPlaybook was created at ${rfc3339(new Date(since))}`
    : `the last successful run finished at ${rfc3339(new Date(since))}`;
  const age = now.getTime() - since;
  if (age > bound) {
    return {
      condition: {
        type: CRON_STALE,
        status: "True",
        reason: "NoRecentSuccess",
        message: `${what}, ${formatDuration(Math.floor(age / 1000) * 1000)} ago, longer than spec.staleAfter ${spec.staleAfter}`,
      },
    };
  }
  return {
    condition: {
      type: CRON_STALE,
      status: "False",
      reason: "RecentSuccess",
      message: `${what}, within spec.staleAfter ${spec.staleAfter}`,
    },
    changesInMs: bound - age + WAKE_SLACK_MS,
  };
}

function nextWake(schedule: Schedule, spec: CronPlaybookSpec, now: Date): number | undefined {
  if (spec.suspend) return undefined;
  const next = schedule.next(now);
  return next ? next.getTime() - now.getTime() + WAKE_SLACK_MS : undefined;
}

function earliest(...delays: (number | undefined)[]): number | undefined {
  const known = delays.filter((d): d is number => d !== undefined);
  return known.length > 0 ? Math.min(...known) : undefined;
}

function withoutUndefined(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value ?? {}));
}
