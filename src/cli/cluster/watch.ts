import { escapeControls } from "../../api/visible-text.js";
import { EXIT, exitCodeForReason } from "../exit-codes.js";
import { printObject } from "../print-object.js";
import { Progress } from "../progress.js";
import { ProgressLineReader } from "../progress-lines.js";
import { type Cluster, ClusterError } from "./connection.js";
import { commandName, namespaceFlag } from "./invoked.js";
import {
  type ClusterPlaybook,
  cancelPlaybook,
  RESOURCE,
  terminalMessage,
  terminalReason,
  watchPlaybook,
} from "./playbooks.js";
import {
  followRun,
  type LogLine,
  podsInStatus,
  type RunPod,
  RunState,
  runStartOf,
  tasksOfPlaybook,
} from "./run-logs.js";

export interface WatchOptions {
  cluster: Cluster;
  name: string;
  output?: "json" | "yaml" | undefined;
  cancelOnInterrupt: boolean;
  progressOut: NodeJS.WritableStream;
  taskOut: NodeJS.WritableStream;
  tty: boolean;
}

/** After the run's end, how long the last pod's log may take to be read to its end. */
const LOG_DRAIN_MS = 5_000;

const TASK_LINE = /^\[([a-z0-9]([-a-z0-9]*[a-z0-9])?)\] /;

/**
 * What the watch shows: the controller's words while no runner speaks, then the runner's lines
 * through a Progress (one per pod: each attempt's runner begins again).
 */
class RunView {
  private readonly options: WatchOptions;
  private progress: Progress | undefined;
  private reader: ProgressLineReader | undefined;
  private outputBytes = 0;
  private lastStatus = "";
  private readonly where: string;
  /** status.startTime: the run's ceiling counts from it, as the runner's does */
  private runStart: Date | undefined;
  /** The pod whose log is being read, the pods whose runner printed its last line, and who waits for one. */
  private followedPod: string | undefined;
  private readonly endedPods = new Set<string>();
  private readonly endWaiters = new Map<string, () => void>();
  /** The last line is out: whatever the streams still deliver before they are torn down is dropped. */
  private finished = false;

  constructor(options: WatchOptions) {
    this.options = options;
    this.where = `${options.cluster.namespace}/${options.name}`;
  }

  say(line: string): void {
    if (this.finished) return;
    if (this.progress) this.progress.say(line);
    else this.options.progressOut.write(`${escapeControls(line)}\n`);
  }

  /** A change of the controller's words while the run has not ended (queued, pending and why). */
  status(playbook: ClusterPlaybook): void {
    if (this.finished) return;
    const condition = playbook.status?.conditions?.find((c) => c.type === "Succeeded");
    if (condition?.status !== "Unknown") return;
    const message = condition.message ?? "";
    const key = `${condition.reason}\n${message}`;
    if (key === this.lastStatus) return;
    this.lastStatus = key;
    // The pod that was followed is gone (a new attempt is pending): its task's clock stops.
    if (condition.reason === "Pending") this.progress?.stop();
    // The runner's own lines say that much once its pod runs.
    if (condition.reason === "Running" && /^pod \S+ is running \(attempt \d+\)$/.test(message)) return;
    this.say(`playbook: ${this.where} ${condition.reason ?? "Pending"}: ${message}`);
  }

  pod(pod: RunPod, first: boolean, playbook: ClusterPlaybook | undefined): void {
    this.progress?.stop();
    this.progress = undefined;
    this.reader = new ProgressLineReader(tasksOfPlaybook(playbook));
    this.followedPod = pod.name;
    if (!first) this.say(`playbook: following pod ${pod.name} (attempt ${pod.attempt})`);
    this.runStart = playbook ? runStartOf(playbook) : undefined;
  }

  line(line: LogLine): void {
    if (this.finished) return;
    const task = TASK_LINE.exec(line.text);
    if (task && this.reader?.isTask(task[1] as string)) {
      const chunk = Buffer.from(`${line.text}\n`);
      this.progress?.beforeOutput();
      this.options.taskOut.write(chunk);
      this.outputBytes += chunk.length;
      this.progress?.afterOutput(chunk, line.at);
      return;
    }
    const read = this.reader?.read(line.text) ?? { kind: "other" as const, line: line.text };
    switch (read.kind) {
      case "begin": {
        this.progress?.stop();
        const taskOut = this.options.taskOut as NodeJS.WritableStream & { isTTY?: boolean };
        this.progress = new Progress({
          out: this.options.progressOut,
          tty: this.options.tty,
          limits: read.limits,
          outputBytes: () => this.outputBytes,
          outputOnTerminal: taskOut === this.options.progressOut || taskOut.isTTY === true,
        });
        this.progress.begin(read.name, read.taskCount, this.runStart ?? new Date(line.at));
        return;
      }
      case "event":
        if (this.progress) this.progress.event(read.event, line.at);
        else this.say(line.text);
        return;
      case "end":
        // The controller's terminal condition says it, in its words (it may know more). The
        // runner prints nothing after it: its pod's log has been read.
        if (this.followedPod !== undefined) {
          this.endedPods.add(this.followedPod);
          this.endWaiters.get(this.followedPod)?.();
        }
        return;
      case "skipped":
        this.say(line.text);
        return;
      case "other":
        this.say(read.line);
        return;
    }
  }

  /**
   * Resolves once the runner of `pod` printed its last line: the rest of its log is the stream's
   * end, which the kubelet sends only at its next look at the container (up to a second later).
   */
  runnerEnded(pod: string | undefined): Promise<void> {
    if (pod === undefined) return new Promise(() => {});
    if (this.endedPods.has(pod)) return Promise.resolve();
    return new Promise((resolve) => this.endWaiters.set(pod, resolve));
  }

  /** The last line: no live line stays behind it. */
  finish(line: string): void {
    this.progress?.stop();
    // The status's message: one line whatever it holds (an older controller's may hold a newline).
    this.options.progressOut.write(`${escapeControls(line)}\n`);
    this.finished = true;
  }
}

function printPlaybook(playbook: ClusterPlaybook | undefined, output: "json" | "yaml" | undefined): void {
  if (output && playbook) printObject(playbook, output);
}

/**
 * Follows the run to its end: progress + `[task]` output; returns the exit code (exitCodeForReason),
 * prints the final Playbook on stdout with -o. Ctrl-C: stop watching (say how to follow/cancel) and
 * return 130, or with cancelOnInterrupt set spec.cancel and wait for it to settle.
 */
export async function watchRun(options: WatchOptions): Promise<number> {
  const { cluster, name } = options;
  const where = `${cluster.namespace}/${name}`;
  const view = new RunView(options);
  const state = new RunState();
  const watching = new AbortController();
  const reading = new AbortController();
  let stopAsked: (() => void) | undefined;
  const stopped = new Promise<"stopped">((resolve) => {
    stopAsked = () => resolve("stopped");
  });
  let cancelling = false;
  const onSignal = (signal: NodeJS.Signals) => {
    const key = signal === "SIGINT" ? "Ctrl-C" : signal;
    if (options.cancelOnInterrupt && !cancelling && !state.ended) {
      cancelling = true;
      view.say(
        `playbook: received ${signal}; cancelling ${where} (spec.cancel) and waiting for the run to settle (${key} again to stop waiting)`,
      );
      cancelPlaybook(cluster, name).catch((error: unknown) => {
        view.say(`playbook: ${(error as Error).message}`);
        stopAsked?.();
      });
      return;
    }
    stopAsked?.();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  const watched = watchPlaybook(
    cluster,
    name,
    (playbook) => {
      state.update(playbook, playbook !== null && terminalReason(playbook) !== undefined);
      if (playbook) view.status(playbook);
    },
    watching.signal,
  );
  const followed = followRun(
    cluster,
    state,
    {
      onPod: (pod, first) => view.pod(pod, first, state.latest),
      onLine: (line) => view.line(line),
      onGone: (pod) => view.say(`playbook: pod ${pod.name} was gone before its log was read`),
      onProblem: (pod, message) =>
        view.say(`playbook: cannot read the log of pod ${pod.name} now (trying again): ${message}`),
    },
    reading.signal,
  ).catch((error: unknown) => {
    // The status still tells the outcome: the watch goes on without the log.
    if (!reading.signal.aborted) view.say(`playbook: cannot read the run's log: ${(error as Error).message}`);
  });
  const ended = (async () => {
    while (!state.ended && !watching.signal.aborted) await state.changed(watching.signal);
    return "ended" as const;
  })();
  try {
    const first = await Promise.race([ended, stopped, watched.then(() => "ended" as const)]);
    if (first === "stopped") {
      reading.abort();
      watching.abort();
      const cli = commandName();
      const ns = namespaceFlag(cluster);
      view.finish(
        cancelling
          ? `playbook: stopped watching ${where}; it is being cancelled: see it end with \`${cli} wait ${name}${ns}\``
          : `playbook: stopped watching ${where}; the run goes on: follow it with \`${cli} logs -f ${name}${ns}\`, cancel it with \`${cli} cancel ${name}${ns}\``,
      );
      printPlaybook(state.latest, options.output);
      return EXIT.interrupted;
    }
    // The last pod's log to its end (its runner has ended by now, or the pod is gone), or to
    // its runner's last line.
    await Promise.race([
      followed,
      view.runnerEnded(state.latest ? podsInStatus(state.latest).podName : undefined),
      stopped,
      new Promise((resolve) => setTimeout(resolve, LOG_DRAIN_MS).unref()),
    ]);
    const playbook = state.latest;
    if (state.gone || !playbook) {
      throw new ClusterError(
        `${RESOURCE} ${name} in namespace ${cluster.namespace} was deleted while watched (context ${cluster.context}, server ${cluster.server})`,
        EXIT.lost,
      );
    }
    const reason = terminalReason(playbook) ?? "Unknown";
    const message = terminalMessage(playbook);
    view.finish(
      `playbook: run ${playbook.status?.phase ?? "ended"} (${reason})${message ? `: ${message}` : ""}`,
    );
    printPlaybook(playbook, options.output);
    return exitCodeForReason(reason);
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    // The outcome is out: tearing the watch and the log stream down (their sockets' ends, at
    // times some 20 ms) does not hold the command's end. They end at the next turn of the loop,
    // which the command's exit does not wait for; the view drops what comes before.
    setImmediate(() => {
      reading.abort();
      watching.abort();
    });
    watched.catch(() => undefined);
  }
}
