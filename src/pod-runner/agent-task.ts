// A task as the runner sees it through an agent: what it asks the agent to start (AgentTaskSpec),
// the events the agent sends back for it (AgentTask) and the agent itself (Agent), as the hub
// hands them out (agent-hub.ts).

import { EventEmitter } from "node:events";
import type { AgentUsage, KillTarget } from "./agent-wire.js";

export interface AgentTaskSpec {
  /** The caller's name for the task, used in messages only; the wire id is the hub's. */
  id?: string | number;
  cwd: string;
  run: string;
  /** The shell's words, run as `WORDS... -c RUN`; absent: the agent's default shell (`sh`). */
  shell?: readonly string[];
  /** The task's whole environment: nothing else is passed on. */
  env: Record<string, string>;
}

export interface AgentExit {
  /** The exit code, null when a signal ended the leader. */
  code: number | null;
  /** The signal's name (`SIGKILL`), null when the leader exited. */
  signal: string | null;
  /** What the leader cost, from the agent's wait4 (absent from an agent that does not send it). */
  usage?: AgentUsage;
}

export interface AgentTaskEvents {
  started: [pid: number];
  stdout: [data: Buffer];
  stderr: [data: Buffer];
  closed: [stream: "out" | "err"];
  exited: [exit: AgentExit];
  /** The agent could not start it (chdir, exec) or refused the frame; an `exited` may follow. */
  failed: [text: string];
  /** The agent's connection ended before the task's streams closed and its leader exited. */
  lost: [reason: string];
}

/** One task started through an agent. Events in the order the agent sent them. */
export class AgentTask extends EventEmitter<AgentTaskEvents> {
  /** The process group id (= the leader's pid), once `started`. */
  pid: number | null = null;
  exit: AgentExit | null = null;
  readonly open = { out: true, err: true };

  /** The wire id, unique per agent. */
  readonly wireId: number;
  readonly spec: AgentTaskSpec;

  private readonly holder: (task: AgentTask, held: boolean) => void;
  private readonly letGo: () => boolean;

  constructor(
    wireId: number,
    spec: AgentTaskSpec,
    holder: (task: AgentTask, held: boolean) => void = () => {},
    letGo: () => boolean = () => false,
  ) {
    super();
    this.wireId = wireId;
    this.spec = spec;
    this.holder = holder;
    this.letGo = letGo;
  }

  /**
   * The connection is no longer held for anyone (a fence or a quit was sent: the run is ending),
   * so its frames are read as they come however far behind this task's reader is: the reader
   * keeps only so much of what comes then (agent-launcher.ts).
   */
  get unheld(): boolean {
    return this.letGo();
  }

  /**
   * Holds the agent's connection while this task's reader is behind (`true`), lets it go on
   * (`false`). A held connection is not read: the agent stops reading its tasks' pipes, and a task
   * that prints faster than its output is written out waits, as it would on a pipe of its own.
   */
  hold(held: boolean): void {
    this.holder(this, held);
  }

  /** Leader exited and both streams closed. */
  get done(): boolean {
    return this.exit !== null && !this.open.out && !this.open.err;
  }
}

export interface Agent {
  readonly container: string;
  /** The agent's pid in the pod's shared process namespace. */
  readonly pid: number;
  readonly uid: number;
  /** The shell tasks run under: `/bin/sh`, or the agent's busybox where the image has none. */
  readonly shell: string;
  /** The agent's environment (its image's ENV, what the kubelet set): its tasks start from it. */
  readonly env: Readonly<Record<string, string>>;
  readonly lost: boolean;
  /**
   * What the agent said without naming a task (a refused kill, an unknown signal), oldest first:
   * the first MAX_AGENT_ERRORS, then one line that says how many more came and were not kept.
   */
  readonly errors: readonly string[];
  start(spec: AgentTaskSpec): AgentTask;
  /** `-PGID` (negative number), `PID`, or `tree`. The agent refuses 0, -1 and its own pid. */
  kill(target: KillTarget, signal: string): void;
  /** SIGKILL everything the agent may signal but `spare` (and itself); resolves to the count left alive. */
  fence(spare: readonly number[]): Promise<number>;
  /** Asks the agent to end its descendants and exit; resolves when the connection has closed. */
  quit(): Promise<void>;
  /** Called once when the connection ends while not quitting; returns an unsubscribe. */
  onLost(callback: (reason: string) => void): () => void;
}
