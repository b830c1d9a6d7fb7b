// The runner's end of the agents' socket (docs/agent.md). Each task container's agent connects to
// the unix socket the runner listens on and says hello; the runner then starts its tasks through
// it, reads their output and exit, and has it signal and sweep. Every decision stays with the
// caller: the hub only carries frames and matches answers to questions.
import { EventEmitter } from "node:events";
import { chmodSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import {
  type AgentFrame,
  AgentWireError,
  decodeAgentFrame,
  encodeRunnerFrame,
  FrameReader,
  type KillTarget,
  type RunnerFrame,
} from "./agent-wire.js";

export type { KillTarget } from "./agent-wire.js";

export interface AgentTaskSpec {
  /** The caller's name for the task, used in messages only; the wire id is the hub's. */
  id?: string | number;
  cwd: string;
  run: string;
  /** The task's whole environment: nothing else is passed on. */
  env: Record<string, string>;
}

export interface AgentExit {
  /** The exit code, null when a signal ended the leader. */
  code: number | null;
  /** The signal's name (`SIGKILL`), null when the leader exited. */
  signal: string | null;
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

  constructor(wireId: number, spec: AgentTaskSpec) {
    super();
    this.wireId = wireId;
    this.spec = spec;
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
  /** What the agent said without naming a task (a refused kill, an unknown signal), oldest first. */
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

export interface AgentHub {
  readonly socketPath: string;
  /** Resolves when every expected container's agent said hello; rejects naming the missing ones. */
  ready(timeoutMs: number): Promise<void>;
  agent(container: string): Agent;
  /** The agents that said hello, in that order. */
  agents(): Agent[];
  close(): Promise<void>;
}

export interface AgentHubOptions {
  /** The container names whose agents must connect; others are refused. */
  expect: readonly string[];
  /** Socket file mode (0o660: the pod's group may connect). */
  mode?: number;
}

class AgentConnection implements Agent {
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
  /** What the agent said without naming a task (a refused kill, a bad frame), latest last. */
  readonly errors: string[] = [];
  private readonly lostCallbacks = new Set<(reason: string) => void>();
  private readonly closeWaiters: Array<() => void> = [];

  private readonly socket: Socket;

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

  start(spec: AgentTaskSpec): AgentTask {
    const wireId = this.nextId++;
    const task = new AgentTask(wireId, spec);
    this.tasks.set(wireId, task);
    this.send({ type: "start", id: wireId, cwd: spec.cwd, run: spec.run, env: spec.env });
    return task;
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
      this.send({ type: "fence", spare: [...spare] });
    });
  }

  quit(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.quitting = true;
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
      case "fenced":
        this.fences.shift()?.resolve(frame.alive);
        return;
      case "error": {
        const task = frame.id === null ? undefined : this.tasks.get(frame.id);
        if (task) task.emit("failed", frame.text);
        else this.errors.push(frame.text);
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
        task.exit = { code: frame.code, signal: frame.signal };
        task.emit("exited", task.exit);
        break;
    }
    if (task.done) this.tasks.delete(frame.id);
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

export async function openAgentHub(socketPath: string, options: AgentHubOptions): Promise<AgentHub> {
  const expected = new Set(options.expect);
  const agents = new Map<string, AgentConnection>();
  const sockets = new Set<Socket>();
  const helloWaiters = new Set<() => void>();

  const accept = (socket: Socket) => {
    sockets.add(socket);
    const reader = new FrameReader();
    let agent: AgentConnection | null = null;
    let endReason = "connection closed";
    socket.on("data", (chunk) => {
      try {
        for (const [code, payload] of reader.push(chunk)) {
          const frame = decodeAgentFrame(code, payload);
          if (agent) {
            agent.receive(frame);
            continue;
          }
          if (frame.type !== "hello") throw new AgentWireError(`first frame is ${frame.type}, not hello`);
          if (!expected.has(frame.container)) {
            throw new AgentWireError(`hello from unexpected container ${frame.container}`);
          }
          if (agents.has(frame.container)) {
            throw new AgentWireError(`second agent for container ${frame.container}`);
          }
          agent = new AgentConnection(socket, frame);
          agents.set(frame.container, agent);
          for (const wake of helloWaiters) wake();
        }
      } catch (error) {
        endReason = `protocol error: ${(error as Error).message}`;
        socket.destroy();
      }
    });
    socket.on("error", (error) => {
      endReason = `connection error: ${error.message}`;
    });
    socket.on("close", () => {
      sockets.delete(socket);
      agent?.ended(endReason);
    });
  };

  const server: Server = createServer(accept);
  rmSync(socketPath, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(socketPath, () => {
      server.off("error", reject);
      resolve();
    });
  });
  chmodSync(socketPath, options.mode ?? 0o660);

  const missing = () => [...expected].filter((name) => !agents.has(name));

  return {
    socketPath,
    ready(timeoutMs: number): Promise<void> {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (missing().length > 0) return;
          cleanup();
          resolve();
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`no agent connected for ${missing().join(", ")} within ${timeoutMs} ms`));
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          helloWaiters.delete(check);
        };
        helloWaiters.add(check);
        check();
      });
    },
    agent(container: string): Agent {
      const agent = agents.get(container);
      if (!agent) throw new Error(`no agent connected for container ${container}`);
      return agent;
    },
    agents: () => [...agents.values()],
    async close(): Promise<void> {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      });
      rmSync(socketPath, { force: true });
    },
  };
}
