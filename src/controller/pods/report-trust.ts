// Whether the runner's termination message may decide the run: only a runner container that ended
// on its own writes its report, so the message is judged against what the pod shows of that end
// (docs/design.md, "Trusting the report"). A runner killed by a signal, an exit code the report's
// reason does not explain, a report of tasks whose containers never started, or task times outside
// the runner's life: the report is not the runner's word, and the run ends RunnerLost saying why.
// Pure readers of the pod as the API server shows it.
import { constants } from "node:os";
import { exitCodeForReason } from "../../api/exit-codes.js";
import type { RunnerReport } from "../../api/report.js";
import { type ContainerTerminated, type PodView, RUNNER_CONTAINER } from "../objects.js";

/** Why a report was not trusted: the `why` of playbook_untrusted_reports_total. */
export const DISTRUST_WHYS = [
  "killed",
  "exit-code",
  "never-started",
  "times",
  "changed",
  "log-tail",
] as const;
export type DistrustWhy = (typeof DISTRUST_WHYS)[number];

export type Trust = { trusted: true } | { trusted: false; why: DistrustWhy; problem: string };

/**
 * How far a time in the report may lie outside the runner container's startedAt..finishedAt:
 * both are the node's clock, the container's times are cut to whole seconds (finishedAt's second
 * is counted to its end), and the rest is slack for the runner's own reading of the clock.
 */
export const CLOCK_SLACK_MS = 2000;

const SIGNAL_NAMES = new Map<number, string>(
  Object.entries(constants.signals).map(([name, number]) => [number, name]),
);

/** The exit codes the runner exits with after its report (src/api/exit-codes.ts), above 128. */
const RUNNER_CODES_ABOVE_128 = new Set([exitCodeForReason("Cancelled")]);

function signalOf(terminated: ContainerTerminated): number | undefined {
  if (terminated.signal) return terminated.signal;
  // containerd leaves `signal` unset: a process killed by signal N exits 128 + N.
  const code = terminated.exitCode;
  if (code > 128 && code < 128 + 65 && !RUNNER_CODES_ABOVE_128.has(code)) return code - 128;
  return undefined;
}

function nameSignal(signal: number): string {
  return SIGNAL_NAMES.get(signal) ?? `signal ${signal}`;
}

/** The signal that killed a container's first process ("SIGKILL"), if one did. */
export function killedBy(terminated: ContainerTerminated): string | undefined {
  const signal = signalOf(terminated);
  return signal === undefined ? undefined : nameSignal(signal);
}

/**
 * Whether the runner container ended on its own, before its message is read: not ended by the
 * kernel for its memory (OOMKilled: its file may hold anything the runner had not finished) and
 * not killed by a signal (whoever killed it may have written
 * the message; a runner the kubelet stops at the pod's deadline or deletion gets SIGTERM, reports
 * and exits 130 on its own).
 */
export function judgeEnding(terminated: ContainerTerminated): Trust {
  if (terminated.reason === "OOMKilled") {
    return {
      trusted: false,
      why: "killed",
      problem: `the runner container did not end on its own (OOMKilled, exit code ${terminated.exitCode}), so its termination message is not its report`,
    };
  }
  const signal = signalOf(terminated);
  if (signal !== undefined) {
    return {
      trusted: false,
      why: "killed",
      problem: `the runner container was killed by ${nameSignal(signal)} (exit code ${terminated.exitCode}) and did not end on its own, so its termination message is not its report`,
    };
  }
  return { trusted: true };
}

function startedAtOf(status: NonNullable<NonNullable<PodView["status"]>["containerStatuses"]>[number]) {
  const running = status.state?.running as { startedAt?: unknown } | undefined;
  return (
    status.state?.terminated?.startedAt ??
    status.lastState?.terminated?.startedAt ??
    (typeof running?.startedAt === "string" ? running.startedAt : undefined)
  );
}

/**
 * Per task (by index), the task container of its image: the one the plan placed it in where it
 * says (tasks naming different Secrets run in different containers of one image), else the one
 * container of that image, when the pod names exactly one.
 */
function taskContainersOf(
  pod: PodView,
  taskImages: readonly string[],
  placed: readonly string[] = [],
): (string | undefined)[] {
  const containers = (pod.spec?.containers ?? []).filter((c) => c.name !== RUNNER_CONTAINER);
  return taskImages.map((image, index) => {
    const name = placed[index];
    const matching = containers.filter((c) => c.image === image && (name === undefined || c.name === name));
    return matching.length === 1 ? matching[0]?.name : undefined;
  });
}

/** A container whose status shows it never started: still waiting, or ended without a start. */
function neverStarted(pod: PodView, container: string): boolean {
  const status = pod.status?.containerStatuses?.find((s) => s.name === container);
  if (!status) return false; // the pod says nothing of it: nothing to hold against the report
  if (status.state?.running !== undefined) return false;
  return !startedAtOf(status);
}

/**
 * Whether the report says the task ran in `container`: an attempt, unless the report itself
 * says the task failed because that container was lost (`k`), as when its agent never said hello
 * (the runner counts the attempt it could not start).
 */
function claimsRunIn(task: RunnerReport["tasks"][number], container: string | undefined): boolean {
  const attempts = task.a ?? (task.p === "Pending" || task.p === "Skipped" ? 0 : 1);
  // decodeReport refuses a Succeeded task that names a lost container.
  return attempts > 0 && (container === undefined || task.k !== container);
}

const time = (ms: number) => new Date(ms).toISOString();

/**
 * Whether the container runtime lost how the runner container ended: containerd's CRI, restarted
 * after the container's task was gone (containerd 2.x cleans up the shim of a container that
 * ended while it was down), shows the container exited 255 with reason `Unknown`, finished when
 * it noticed. That exit code says nothing of the runner, and no task can bring it about (only
 * the node's runtime restarting can): the report is then judged by its containers and times.
 */
export function exitLostByRuntime(terminated: ContainerTerminated): boolean {
  return terminated.reason === "Unknown" && terminated.exitCode === 255;
}

/**
 * The report against the runner container's end (`terminated`) and the rest of the pod, once it
 * decoded: the exit code its reason gives, the containers of the tasks it says ran, and its times
 * inside the runner container's life, its start the run's. `taskImages` (per task) names each
 * task's container; a task reported run whose image no single container has is not believed.
 * The finally tasks' rows count on after the main tasks' (in `taskNames` and `taskImages` too).
 */
export function judgeReport(
  pod: PodView,
  terminated: ContainerTerminated,
  report: RunnerReport,
  taskNames: readonly string[],
  taskImages: readonly string[] = [],
  /** The run's start the runner was handed (its plan's runStartTime), when known. */
  runStart?: string,
  /** Per task, the container the plan placed it in (task-K), when known. */
  taskContainers: readonly string[] = [],
): Trust {
  const ending = judgeEnding(terminated);
  if (!ending.trusted) return ending;
  const expected = exitCodeForReason(report.reason);
  if (terminated.exitCode !== expected && !exitLostByRuntime(terminated)) {
    return {
      trusted: false,
      why: "exit-code",
      problem: `the runner exited with code ${terminated.exitCode}, which its report does not explain (a runner that reports ${report.reason} exits ${expected}), so its termination message is not trusted`,
    };
  }
  const containers = taskContainersOf(pod, taskImages, taskContainers);
  const rows = [...report.tasks, ...(report.fin ?? [])];
  for (const [index, task] of rows.entries()) {
    const container = containers[index];
    const image = taskImages[index];
    if (container === undefined && image !== undefined && claimsRunIn(task, undefined)) {
      // The task's image is in no container of the pod (or in several): it ran nowhere the pod shows.
      return {
        trusted: false,
        why: "never-started",
        problem: `the report says task ${taskNames[index] ?? index + 1} ran (${task.p}), but no single container of the pod runs its image ${image}, so the report is not trusted`,
      };
    }
    if (container === undefined || !claimsRunIn(task, container) || !neverStarted(pod, container)) continue;
    return {
      trusted: false,
      why: "never-started",
      problem: `the report says task ${taskNames[index] ?? index + 1} ran (${task.p}), but its container ${container} never started, so the report is not trusted`,
    };
  }
  const startedAt = Date.parse(terminated.startedAt ?? "");
  const finishedAt = Date.parse(terminated.finishedAt ?? "");
  const earliest = Number.isNaN(startedAt) ? -Infinity : startedAt - CLOCK_SLACK_MS;
  // finishedAt's second is counted to its end.
  const latest = Number.isNaN(finishedAt) ? Infinity : finishedAt + 1000 + CLOCK_SLACK_MS;
  const life = `${Number.isNaN(startedAt) ? "?" : time(startedAt)}..${Number.isNaN(finishedAt) ? "?" : time(finishedAt)}`;
  const outside = (ms: number) => ms < earliest || ms > latest;
  const start = Date.parse(report.start);
  // The report's start (status.startTime is taken from it) is the run's: its plan's runStartTime,
  // handed to the runner. Never after that (give or take the clocks' slack), nor after the runner
  // container's end.
  const startLimit = Math.min(
    latest,
    runStart !== undefined ? Date.parse(runStart) + CLOCK_SLACK_MS : Infinity,
  );
  if (Number.isNaN(start) || start > startLimit) {
    return {
      trusted: false,
      why: "times",
      problem: `the report says the run started at ${time(start)}, after ${runStart !== undefined && Date.parse(runStart) + CLOCK_SLACK_MS < latest ? `the run's start ${runStart}` : `the runner container's life (${life})`}, so the report is not trusted`,
    };
  }
  for (const [index, task] of rows.entries()) {
    if (!task.t) continue;
    const [from, to] = [start + task.t[0], start + task.t[1]];
    if (!outside(from) && !outside(to)) continue;
    return {
      trusted: false,
      why: "times",
      problem: `the report says task ${taskNames[index] ?? index + 1} ran ${time(from)}..${time(to)}, outside the runner container's life (${life}), so the report is not trusted`,
    };
  }
  const end = Date.parse(report.end);
  if (outside(end)) {
    return {
      trusted: false,
      why: "times",
      problem: `the report says the run ended at ${time(end)}, outside the runner container's life (${life}), so the report is not trusted`,
    };
  }
  return { trusted: true };
}
