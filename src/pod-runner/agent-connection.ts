// One agent's connection, once its hello was taken: starts tasks through it, matches the agent's
// frames to them, holds the connection while a task's reader is behind, and ends every task it
// carried when the connection ends.

import type { Socket } from "node:net";
import { type Agent, AgentTask, type AgentTaskSpec } from "./agent-task.js";
import {
  type AgentFrame,
  AgentWireError,
  encodeRunnerFrame,
  type KillTarget,
  type RunnerFrame,
} from "./agent-wire.js";

/** How many of an agent's errors that name no task are kept; the rest are counted. */
export const MAX_AGENT_ERRORS = 20;

export class AgentConnection implements Agent {
  readonly container: string;
  readonly pid: number;
  readonly uid: number;
  readonly shell: string;
  readonly env: Readonly<Record<string, string>>;
  lost = false;
  private quitting = false;
  private closed = false;
  private nextId = 1;
  private readonly tasks = new Map<number, AgentTask>();
  private readonly fences: Array<{ resolve: (alive: number) => void; reject: (error: Error) => void }> = [];
  /** The first MAX_AGENT_ERRORS things the agent said without naming a task (a refused kill). */
  private readonly keptErrors: string[] = [];
  /** How many more it said: counted, not kept, so an agent cannot grow the runner's memory. */
  private droppedErrors = 0;
  /** Set by a fence or a quit: the connection is read as frames come, whoever is behind. */
  private letGoAll = false;
  private readonly lostCallbacks = new Set<(reason: string) => void>();
  private readonly closeWaiters: Array<() => void> = [];

  private readonly socket: Socket;
  /** The tasks whose reader is behind: the connection is paused while any is. */
  private readonly held = new Set<AgentTask>();

  constructor(socket: Socket, hello: Extract<AgentFrame, { type: "hello" }>) {
    this.socket = socket;
    this.container = hello.container;
    this.pid = hello.pid;
    this.uid = hello.uid;
    this.shell = hello.shell;
    this.env = hello.env;
  }

  private send(frame: RunnerFrame): void {
    if (this.closed) throw new Error(`agent of container ${this.container} is gone`);
    this.socket.write(encodeRunnerFrame(frame));
  }

  get errors(): readonly string[] {
    if (this.droppedErrors === 0) return [...this.keptErrors];
    return [...this.keptErrors, `${this.droppedErrors} more error(s) from the agent were not kept`];
  }

  private noteError(text: string): void {
    if (this.keptErrors.length < MAX_AGENT_ERRORS) this.keptErrors.push(text);
    else this.droppedErrors += 1;
  }

  start(spec: AgentTaskSpec): AgentTask {
    const wireId = this.nextId++;
    const task = new AgentTask(
      wireId,
      spec,
      (held, on) => this.hold(held, on),
      () => this.letGoAll,
    );
    this.tasks.set(wireId, task);
    this.send({
      type: "start",
      id: wireId,
      cwd: spec.cwd,
      run: spec.run,
      shell: spec.shell ? [...spec.shell] : [],
      env: spec.env,
    });
    return task;
  }

  private hold(task: AgentTask, on: boolean): void {
    if (on && !this.letGoAll) this.held.add(task);
    else this.held.delete(task);
    if (this.held.size > 0) this.socket.pause();
    else this.socket.resume();
  }

  /**
   * The run is ending: the fence's and the quit's answers queue behind the tasks' output, so
   * everything is read as it comes, whoever is behind, from now on (each task's reader keeps only
   * so much of it: AgentTask.unheld).
   */
  private letGo(): void {
    this.letGoAll = true;
    this.held.clear();
    this.socket.resume();
  }

  kill(target: KillTarget, signal: string): void {
    this.send({ type: "kill", target, signal });
  }

  fence(spare: readonly number[]): Promise<number> {
    return new Promise((resolve, reject) => {
      if (this.closed) {
        reject(new Error(`agent of container ${this.container} is gone`));
        return;
      }
      this.fences.push({ resolve, reject });
      this.letGo();
      this.send({ type: "fence", spare: [...spare] });
    });
  }

  quit(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.quitting = true;
    this.letGo();
    const done = new Promise<void>((resolve) => this.closeWaiters.push(resolve));
    this.send({ type: "quit" });
    return done;
  }

  onLost(callback: (reason: string) => void): () => void {
    this.lostCallbacks.add(callback);
    return () => this.lostCallbacks.delete(callback);
  }

  /** A decoded frame from this agent. */
  receive(frame: AgentFrame): void {
    switch (frame.type) {
      case "hello":
        throw new AgentWireError(`second hello from container ${this.container}`);
      case "named":
        throw new AgentWireError(`proof from container ${this.container} after its hello was taken`);
      case "fenced":
        this.fences.shift()?.resolve(frame.alive);
        return;
      case "error": {
        const task = frame.id === null ? undefined : this.tasks.get(frame.id);
        if (task) task.emit("failed", frame.text);
        else this.noteError(frame.text);
        return;
      }
    }
    const task = this.tasks.get(frame.id);
    if (!task) return;
    switch (frame.type) {
      case "started":
        task.pid = frame.pid;
        task.emit("started", frame.pid);
        break;
      case "stdout":
        task.emit("stdout", frame.data);
        break;
      case "stderr":
        task.emit("stderr", frame.data);
        break;
      case "closed":
        task.open[frame.stream] = false;
        task.emit("closed", frame.stream);
        break;
      case "exited":
        task.exit = {
          code: frame.code,
          signal: frame.signal,
          ...(frame.usage ? { usage: frame.usage } : {}),
        };
        task.emit("exited", task.exit);
        break;
    }
    if (task.done) {
      this.tasks.delete(frame.id);
      if (this.held.has(task)) this.hold(task, false);
    }
  }

  /** The connection ended (or was ended for a protocol error). */
  ended(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    const expected = this.quitting;
    for (const task of this.tasks.values()) task.emit("lost", reason);
    this.tasks.clear();
    // An unanswered fence: nothing is known to be dead.
    for (const fence of this.fences.splice(0)) {
      fence.reject(
        new Error(`agent of container ${this.container} ended before its fence answered: ${reason}`),
      );
    }
    for (const resolve of this.closeWaiters.splice(0)) resolve();
    if (!expected) {
      this.lost = true;
      for (const callback of this.lostCallbacks) callback(reason);
    }
  }
}
