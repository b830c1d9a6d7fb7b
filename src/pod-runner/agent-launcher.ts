// The agent launcher: an attempt started by the agent of its task's container (agent/agent.c,
// spoken to through agent-hub.ts). The agent only carries out: it forks `sh -c RUN` in a new
// session, streams stdout and stderr as O/E frames, says when the leader exited (X) and when
// every holder of a pipe closed it (C), and sends the signals it is told to (K). Every decision
// (deadline, stall, cancel file, grace, SIGKILL) stays the runner's, in attempt.ts.
//
// The runner shares the pod's process namespace with the task containers, so it sees their
// processes in /proc (stat is readable by any user) but may not signal them (another uid): what
// it sees tells it whether a tree is gone, and every signal goes through the agent.
import { performance } from "node:perf_hooks";
import { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import type { TaskShell } from "../api/shell.js";
import type { Agent, AgentExit, AgentTask } from "./agent-hub.js";
import type { AttemptSpec } from "./attempt.js";
import { writeCancelFile } from "./cancel-file.js";
import {
  KILL_CONFIRM_MS,
  type Launched,
  type Launcher,
  TERM_NOT_SENT_LEADER_GONE,
  type TermSent,
  type TreeEnd,
  within,
} from "./launcher.js";
import { descendantsIn, isStopped, liveProcesses, type ProcEntry, ticksNow } from "./proc-tree.js";
import { ATTEMPT_ID_VAR, CANCEL_FILE_VAR } from "./process-table.js";

export type { ProcEntry };

/** The agent of one task container: what the launcher and the run use of agent-hub.ts's Agent. */
export type AgentLike = Pick<Agent, "container" | "pid" | "lost" | "start" | "kill" | "fence" | "quit"> & {
  /** the agent's own environment, where a pod's task starts from (absent: the runner's) */
  env?: Readonly<Record<string, string>>;
  /** the agent's user, as its hello said: its tasks' */
  uid?: number;
  /**
   * The container's live processes but the agent, numbered as the agent numbers them. Absent in
   * a pod, where the runner shares the agents' process namespace and reads them in /proc below
   * `pid`; a local run's containers have namespaces of their own (local-pids.ts).
   */
  descendants?(): ProcEntry[];
};

/** Sends a signal through the agent; one that is gone can signal nothing more. Says whether it was sent. */
function tell(agent: AgentLike, target: number | "tree", signal: string): boolean {
  try {
    agent.kill(target, signal);
    return true;
  } catch {
    // The connection is closed: the agent killed its descendants as it left.
    return false;
  }
}

/**
 * What became of a SIGTERM told to the agent: a stopped agent reads no frame (it carries the
 * signal out only if it is continued), and a gone one took none.
 */
function termSent(agent: AgentLike, sent: boolean, byGroup: boolean): TermSent {
  if (!byGroup) return TERM_NOT_SENT_LEADER_GONE;
  if (!sent) {
    return {
      delivered: false,
      detail: `SIGTERM not delivered: the agent of container ${agent.container} is gone`,
    };
  }
  if (isStopped(agent.pid)) {
    return {
      delivered: false,
      detail: `SIGTERM not delivered: the agent of container ${agent.container} is stopped (SIGSTOP, sent by a task) and carries out no signal`,
    };
  }
  return {
    delivered: true,
    detail: `SIGTERM sent to its process group through the agent of container ${agent.container}`,
  };
}

const POLL_MS = 20;
/**
 * What one task stream keeps queued for a reader that is behind once the agent's connection may no
 * longer be held for it (the attempt is being stopped, or the run is ending); more is dropped.
 */
export const KEPT_WHEN_UNHELD = 1 << 20;
/** How soon the kill looks again for what SIGKILL has not ended yet, doubling up to the most. */
const KILL_LOOK_MS = 10;
const MAX_KILL_LOOK_MS = 100;

/**
 * An agent's descendants, numbered as it numbers them: its own view where it has one (a local
 * run's container), else /proc below its pid (a pod's shared namespace).
 */
export function descendantsOf(agent: AgentLike): ProcEntry[] {
  return agent.descendants?.() ?? agentDescendants(agent.pid);
}

/** The live descendants of `root` (an agent: the subreaper of everything its tasks started). */
export function agentDescendants(root: number, processes = liveProcesses()): ProcEntry[] {
  return descendantsIn(root, processes);
}

/**
 * What the agent said when a started task could not become its shell, as the task's failure says
 * it: a missing shell names the field that asked for it (spec.tasks[1].shell).
 */
export function describeExecFailure(text: string, container: string, shell: TaskShell | undefined): string {
  if (shell === undefined || text.startsWith("chdir "))
    return `could not start in container ${container}: ${text}`;
  return `${shell.field} ${JSON.stringify(shell.value)}: container ${container} has no such shell (${text}); the task was not run`;
}

/** Which attempt of the run a process of a task container belongs to (agent-mode.ts). */
export interface AttemptsSeen {
  /** notes an attempt's start in `container` (its leader's start in clock ticks) */
  started(container: string, attemptId: string, startedFrom: number): void;
  /** the attempts that processes still alive in the task containers belong to */
  liveAttempts(): Set<string>;
}

/** Starts attempts through `agent`, the agent of one task container. */
export function agentLauncher(
  agent: AgentLike,
  /** the run's other agents: what earlier tasks left in their containers gets SIGTERM with a stop */
  others: () => readonly AgentLike[] = () => [],
  attempts?: AttemptsSeen,
  /** the cancel file's path as the task sees it, where it differs from the runner's (a local run) */
  cancelFileSeen?: (attemptId: string) => string,
): Launcher {
  const seen = () => descendantsOf(agent);
  const gone = () => `could not start: container ${agent.container} is gone (its agent's connection closed)`;
  return {
    async launch(spec: AttemptSpec) {
      if (agent.lost) return { error: gone(), lostContainer: agent.container };
      const env: Record<string, string> = {};
      for (const [name, value] of Object.entries(spec.env)) if (value !== undefined) env[name] = value;
      env[ATTEMPT_ID_VAR] = spec.attemptId;
      env[CANCEL_FILE_VAR] = (cancelFileSeen ?? spec.cancelFileOf)(spec.attemptId);
      // A stream whose reader is behind (push refused) holds the agent's connection until it is
      // read again or dropped: the task then waits on its pipe, and the runner's memory stays
      // bounded however fast it prints.
      let task: AgentTask | undefined;
      const behind = [false, false];
      // Once the attempt is being stopped, its exit and its pipes' ends must be read while they
      // come (they queue behind its output), and so must the fence's answer once the run ends: the
      // connection is no longer held, and a reader that is behind keeps only KEPT_WHEN_UNHELD bytes
      // of what comes then. The rest is counted and dropped: a task that ignores SIGTERM and
      // prints through its grace cannot grow the runner's memory however slow its stdout is.
      let stopping = false;
      let dropped = 0;
      const holdFor = (index: 0 | 1, on: boolean) => {
        if (stopping) on = false;
        if (behind[index] === on) return;
        behind[index] = on;
        task?.hold(behind[0] === true || behind[1] === true);
      };
      const deliver = (index: 0 | 1, chunk: Buffer) => {
        const readable = streams[index];
        if ((stopping || task?.unheld === true) && readable.readableLength >= KEPT_WHEN_UNHELD) {
          dropped += chunk.length;
          return;
        }
        if (!readable.push(chunk) && !readable.destroyed) holdFor(index, true);
      };
      const stream = (index: 0 | 1) => {
        const readable = new Readable({ read: () => holdFor(index, false) });
        readable.once("close", () => holdFor(index, false));
        return readable;
      };
      const streams = [stream(0), stream(1)] as const;
      const endStreams = () => {
        for (const stream of streams) if (!stream.readableEnded) stream.push(null);
      };
      let leaderAlive = true;
      let execFailure: string | undefined;
      let exit: AgentExit = { code: null, signal: null };
      let exited!: () => void;
      const leaderExited = new Promise<void>((resolve) => {
        exited = resolve;
      });
      let lost!: (container: string) => void;
      const lostPromise = new Promise<string>((resolve) => {
        lost = resolve;
      });
      const started = await new Promise<{ pid: number } | { error: string; lostContainer?: string }>(
        (resolve) => {
          try {
            task = agent.start({
              id: spec.attemptId,
              cwd: spec.cwd ?? ".",
              run: spec.run,
              env,
              ...(spec.shell ? { shell: spec.shell.words } : {}),
            });
          } catch {
            resolve({ error: gone(), lostContainer: agent.container });
            return;
          }
          task.on("started", (pid) => resolve({ pid }));
          task.on("failed", (text) => {
            // After its start: the leader could not chdir or exec, and exits 127.
            execFailure = describeExecFailure(text, agent.container, spec.shell);
            resolve({ error: `could not start: ${text}` });
          });
          task.on("stdout", (chunk) => deliver(0, chunk));
          task.on("stderr", (chunk) => deliver(1, chunk));
          task.on("closed", (stream) => {
            const readable = streams[stream === "out" ? 0 : 1];
            if (!readable.readableEnded) readable.push(null);
          });
          task.on("exited", (status) => {
            leaderAlive = false;
            exit = status;
            exited();
          });
          task.on("lost", () => {
            resolve({ error: gone(), lostContainer: agent.container });
            // Nothing more comes from that container: its pipes are over too.
            endStreams();
            if (!leaderAlive) return;
            leaderAlive = false;
            lost(agent.container);
          });
        },
      );
      if ("error" in started) {
        endStreams();
        return started;
      }
      const pgid = started.pid;
      // A leader already gone (a task of a few ms) has no start left to read: now is a bound that
      // keeps it from claiming every older process of its container (0 would).
      const startedFrom = seen().find((entry) => entry.pid === pgid)?.start ?? ticksNow();
      attempts?.started(agent.container, spec.attemptId, startedFrom);
      /** the attempt's live processes: the agent's descendants in its group or started since */
      const ofAttempt = (entry: ProcEntry) => entry.pgrp === pgid || entry.start >= startedFrom;
      const attemptProcesses = () => seen().filter(ofAttempt);
      const launched: Launched = {
        pgid,
        startedFrom,
        streams: [...streams],
        // Each chunk is the agent frame's copy of the task's bytes (decodeAgentFrame), no one else's.
        chunksOwned: true,
        leaderAlive: () => leaderAlive,
        leaderExited,
        exit: () => exit,
        lost: lostPromise,
        // Another uid's environment cannot be read: a process is an attempt's by its container
        // and its start (after the attempt's leader, before the next attempt's there).
        async warnLeftovers(_runCookie, text) {
          const failures: string[] = [];
          for (const id of attempts?.liveAttempts() ?? []) {
            if (id === spec.attemptId) continue;
            const path = spec.cancelFileOf(id);
            const written = writeCancelFile(path, text);
            if (!written.written) failures.push(`cancel file ${path}: ${written.reason}`);
          }
          return failures;
        },
        endTree: (killGraceMs, _runCookie, hurry, onTerm) => {
          stopping = true;
          holdFor(0, false);
          holdFor(1, false);
          return endAgentTree(
            {
              agent,
              pgid,
              leaderAlive: () => leaderAlive,
              leaderExited,
              attemptProcesses,
              ofAttempt,
              descendants: seen,
              others,
            },
            killGraceMs,
            hurry,
            onTerm,
          );
        },
        release: () => {},
        execFailure: () => execFailure,
        droppedBytes: () => dropped,
        usage: () =>
          exit.usage
            ? { cpuSeconds: exit.usage.cpuMicros / 1e6, peakMemoryBytes: exit.usage.maxRssKiB * 1024 }
            : {},
      };
      return { launched };
    },
  };
}

/**
 * A stopped agent (a task sent it SIGSTOP: it shares their user) would carry out no signal: it is
 * continued where the runner may signal it (a local run). In a pod, under another user, it may
 * not, and the stop is reported as what kept the kill from the tasks.
 */
function wakeIfStopped(agent: AgentLike): void {
  if (!isStopped(agent.pid)) return;
  try {
    process.kill(agent.pid, "SIGCONT");
  } catch {
    // another user's: the report says what the stop kept from happening
  }
}

/** What of the attempt still runs after its kill, and why; undefined when nothing does. */
function describeUnended(tree: AgentTree): string | undefined {
  const left = tree.attemptProcesses().length;
  if (left === 0) return undefined;
  const count = left === 1 ? "1 process" : `${left} processes`;
  return isStopped(tree.agent.pid)
    ? `its process group could not be killed: the agent of container ${tree.agent.container} was stopped (SIGSTOP, sent by a task: they share its user) and carried out no signal; ${count} of the task still ran`
    : `its process group could not be killed: ${count} of the task still ran after SIGKILL`;
}

interface AgentTree {
  agent: AgentLike;
  pgid: number;
  leaderAlive: () => boolean;
  leaderExited: Promise<void>;
  attemptProcesses: () => ProcEntry[];
  /** whether a live process is the attempt's: in its group, or started since its leader */
  ofAttempt: (entry: ProcEntry) => boolean;
  /** every live descendant of the agent: what this attempt and earlier ones left in its container */
  descendants: () => ProcEntry[];
  others: () => readonly AgentLike[];
}

/**
 * SIGTERM through the agent, the grace window in which the attempt may end by itself (Exited),
 * then SIGKILL to the group and to every descendant of the agent (`tree`): a stop ends the run,
 * so what earlier tasks of this container left goes too. What they left in other containers
 * gets its SIGTERM now too, and the rest of this grace before the fence at the end of the run.
 */
async function endAgentTree(
  tree: AgentTree,
  killGraceMs: number,
  hurry?: AbortSignal,
  onTerm?: (term: TermSent) => void,
): Promise<TreeEnd> {
  wakeIfStopped(tree.agent);
  const graceStartedAt = performance.now();
  const graceEndsAt = graceStartedAt + killGraceMs;
  if (killGraceMs > 0) {
    // By group id while the leader is unreaped (the agent reaps it at once when it exits); after
    // that the group's members one by one, so a recycled group id is never signalled.
    // Each process gets SIGTERM once (a second one reads as "stop now, skip the clean-up"): the
    // group by id while the leader is unreaped, then what left the group one by one, and what
    // earlier tasks left in this container, as a stop ends the run.
    const byGroup = tree.leaderAlive();
    const sent = byGroup && tell(tree.agent, -tree.pgid, "SIGTERM");
    onTerm?.(termSent(tree.agent, sent, byGroup));
    for (const entry of tree.descendants()) {
      if (!byGroup || entry.pgrp !== tree.pgid) tell(tree.agent, entry.pid, "SIGTERM");
    }
    for (const other of tree.others()) {
      if (other === tree.agent || other.lost) continue;
      for (const entry of descendantsOf(other)) tell(other, entry.pid, "SIGTERM");
    }
    while (performance.now() < graceEndsAt && !hurry?.aborted) {
      const wait = Math.min(POLL_MS, Math.max(1, graceEndsAt - performance.now()));
      if (tree.leaderAlive()) await within(tree.leaderExited, wait);
      else await sleep(wait);
      if (!tree.leaderAlive() && tree.attemptProcesses().length === 0) {
        return { ending: "Exited", runClean: false, graceEndsAt };
      }
    }
  }
  const cut = killGraceMs > 0 && hurry?.aborted === true && performance.now() < graceEndsAt;
  const graceCutAfterMs = cut ? Math.round(performance.now() - graceStartedAt) : undefined;
  // The group first, by id and without a look around, so the kill waits for nothing: while the
  // leader is unreaped the id is still its group's, and a group kill leaves no member behind (the
  // kernel fails a fork that races it). Without it, the agent's sweep of its descendants.
  const byGroup = tree.leaderAlive();
  if (byGroup) tell(tree.agent, -tree.pgid, "SIGKILL");
  else tell(tree.agent, "tree", "SIGKILL");
  const confirmBy = performance.now() + KILL_CONFIRM_MS;
  // A look through /proc takes the CPU the dying tree needs to end (in the pod's share, the runner's
  // container outweighs a task's): the first waits for the leader's exit, which the agent reports
  // as it reaps it, and by then the group is mostly gone.
  if (byGroup) await within(tree.leaderExited, KILL_CONFIRM_MS);
  // Then what the group kill cannot reach, one by one: processes that left the group (setsid, double
  // fork) and what earlier tasks left in this container, as a stop ends the run. The group's own
  // members are not signalled again. Looked for at doubling intervals until a look finds none of
  // them and nothing of the attempt: an escaper may fork between two kills.
  for (let wait = KILL_LOOK_MS; ; wait = Math.min(wait * 2, MAX_KILL_LOOK_MS)) {
    const live = tree.descendants();
    const outside = byGroup ? live.filter((entry) => entry.pgrp !== tree.pgid) : live;
    if (byGroup) for (const entry of outside) tell(tree.agent, entry.pid, "SIGKILL");
    else if (live.length > 0) tell(tree.agent, "tree", "SIGKILL");
    if (outside.length === 0 && !live.some(tree.ofAttempt)) break;
    const left = confirmBy - performance.now();
    if (left <= 0) break;
    await sleep(Math.min(wait, left));
  }
  await within(tree.leaderExited, Math.max(0, confirmBy - performance.now()));
  // The kill is believed only when /proc shows it: a stopped agent carries out nothing it is told.
  const unended = describeUnended(tree);
  if (unended !== undefined) {
    return {
      unended,
      runClean: false,
      graceEndsAt,
      ...(graceCutAfterMs !== undefined ? { graceCutAfterMs } : {}),
    };
  }
  return {
    ending: "Killed",
    runClean: false,
    graceEndsAt,
    ...(graceCutAfterMs !== undefined ? { graceCutAfterMs } : {}),
  };
}
