// The runner's end of the agents' socket (docs/agent.md). Each task container's agent connects to
// the unix socket the runner listens on and says hello; the runner then starts its tasks through
// it, reads their output and exit, and has it signal and sweep. Every decision stays with the
// caller: the hub only carries frames and matches answers to questions.

import { randomBytes, timingSafeEqual } from "node:crypto";
import { EventEmitter } from "node:events";
import {
  chmodSync,
  chownSync,
  closeSync,
  constants,
  mkdirSync,
  openSync,
  readFileSync,
  rmSync,
  writeSync,
} from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { dirname, join } from "node:path";
import {
  type AgentFrame,
  type AgentUsage,
  AgentWireError,
  decodeAgentFrame,
  encodeRunnerFrame,
  FrameReader,
  type KillTarget,
  MAX_HELLO_PAYLOAD,
  MAX_PAYLOAD,
  type RunnerFrame,
} from "./agent-wire.js";

export type { KillTarget } from "./agent-wire.js";

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

export interface AgentHub {
  readonly socketPath: string;
  /** Resolves when every expected container's agent said hello; rejects naming the missing ones. */
  ready(timeoutMs: number): Promise<void>;
  /**
   * Resolves to whether `container`'s agent said hello (and, with `uids`, proved its user) within
   * `timeoutMs`; false at once when `signal` aborts.
   */
  readyFor(container: string, timeoutMs: number, signal?: AbortSignal): Promise<boolean>;
  agent(container: string): Agent;
  /** The agents that said hello, in that order. */
  agents(): Agent[];
  /** Why connections were refused before a hello was taken: each reason once, first 20, no peer bytes. */
  refusals(): string[];
  /** Stops taking connections and removes the socket and the keys (done once every agent said hello). */
  stopListening(): void;
  close(): Promise<void>;
}

export interface AgentHubOptions {
  /** The container names whose agents must connect; others are refused. */
  expect: readonly string[];
  /** Socket file mode (0o660: the pod's group may connect); the key files get its read bits. */
  mode?: number;
  /** The group of the socket and the keys, where the agents' group is not the folder's. */
  group?: number;
  /** How long a connection may take to show its key and say hello (10 s). */
  helloMs?: number;
  /**
   * The user each container's agent runs as, where every container has a user of its own (a pod):
   * a hello is taken only once its agent proved it runs as its container's user, so a task of
   * another container that read the key cannot take the agent's place, and a task may start
   * before every agent said hello (docs/agent.md, "The connection").
   */
  uids?: Readonly<Record<string, number>>;
}

/** A 15-character nonce of letters and digits (about 89 bits), which the agent takes as its name. */
function newNonce(): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  return [...randomBytes(15)].map((byte) => alphabet[byte % alphabet.length]).join("");
}

/**
 * Why the process a hello names is not proved to be its container's agent, or null when it is:
 * its name and its user, read together in /proc/PID/status, must be the nonce sent on this
 * connection alone and the container's user. A process's name is its own to set, so only a
 * process of that user which took the nonce from this connection can show it.
 */
function proofProblem(pid: number, nonce: string, uid: number): string | null {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, "latin1");
  } catch {
    return `its process (pid ${pid}) is not there`;
  }
  const uids = /^Uid:\t(\d+)\t(\d+)\t(\d+)\t(\d+)$/m.exec(status);
  if (!uids || uids.slice(1).some((id) => Number(id) !== uid)) {
    return `its process (pid ${pid}) does not run as the container's user ${uid}`;
  }
  if (/^Name:\t(.*)$/m.exec(status)?.[1] !== nonce) {
    return `its process (pid ${pid}) did not show the nonce sent on its connection`;
  }
  return null;
}

/** How many of an agent's errors that name no task are kept; the rest are counted. */
export const MAX_AGENT_ERRORS = 20;

/** A connection turned away before its hello was taken. */
class AgentRefusal extends Error {
  override name = "AgentRefusal";
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

/** Bytes of a connection's key: hex of 32 random bytes, sent before anything else. */
export const KEY_LENGTH = 64;
/** The folder beside the socket that holds one key file per expected container. */
export const KEYS_DIR = "keys";
/** How long a connection may take to show its key and say hello. */
const DEFAULT_HELLO_MS = 10_000;

/**
 * The key files: one per expected container, readable by the agents (the pod's group) and no
 * one else, created exclusively and never through a symlink. Each is removed once its agent said
 * hello, and all of them once every agent did: no task ever finds one.
 */
function writeKeys(dir: string, names: Iterable<string>, mode: number): Map<string, Buffer> {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { mode: mode | 0o100 | ((mode & 0o040) >> 2) });
  const keys = new Map<string, Buffer>();
  for (const name of names) {
    const key = Buffer.from(randomBytes(KEY_LENGTH / 2).toString("hex"), "latin1");
    const fd = openSync(
      join(dir, name),
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      mode & 0o440,
    );
    try {
      writeSync(fd, key);
    } finally {
      closeSync(fd);
    }
    keys.set(name, key);
  }
  return keys;
}

export async function openAgentHub(socketPath: string, options: AgentHubOptions): Promise<AgentHub> {
  const expected = new Set(options.expect);
  const agents = new Map<string, AgentConnection>();
  const sockets = new Set<Socket>();
  const helloWaiters = new Set<() => void>();
  const refusals: string[] = [];
  const helloMs = options.helloMs ?? DEFAULT_HELLO_MS;
  // Connections that have not said hello yet: a few more than there are agents, so a crowd of
  // strangers can hold neither memory nor an agent's place.
  const maxPending = expected.size + 4;
  let listening = true;
  const mode = options.mode ?? 0o660;
  const keysDir = join(dirname(socketPath), KEYS_DIR);
  const keys = writeKeys(keysDir, expected, mode);

  const refuse = (why: string) => {
    if (refusals.length < 20 && !refusals.includes(why)) refusals.push(why);
  };

  /** The container whose key this is, or null. Every key is compared, in constant time. */
  const containerOfKey = (shown: Buffer): string | null => {
    let found: string | null = null;
    for (const [name, key] of keys) if (timingSafeEqual(key, shown)) found = name;
    return found;
  };

  // Once every agent said hello nothing else may connect: the socket and the keys go, before any
  // task starts (the runner starts none before that), so no task ever reaches either.
  const stopListening = () => {
    if (!listening) return;
    listening = false;
    server.close();
    for (const socket of waiting) socket.destroy();
    rmSync(socketPath, { force: true });
    rmSync(keysDir, { recursive: true, force: true });
  };

  /** Connections that have not said hello, oldest first. */
  const waiting = new Set<Socket>();
  const accept = (socket: Socket) => {
    if (!listening) {
      refuse("a connection after every agent said hello");
      socket.destroy();
      return;
    }
    // The oldest gives way: an agent shows its key and says hello at once, so a crowd that
    // connects and says nothing cannot keep it out.
    if (waiting.size >= maxPending) {
      const oldest = waiting.values().next().value as Socket;
      refuse("a connection that said no hello before others came (the oldest of too many)");
      oldest.destroy();
    }
    waiting.add(socket);
    sockets.add(socket);
    let preamble: Buffer = Buffer.alloc(0);
    let container: string | null = null;
    let agent: AgentConnection | null = null;
    /** The hello waiting for its agent's proof, and the nonce it was sent. */
    let proving: { hello: Extract<AgentFrame, { type: "hello" }>; nonce: string } | null = null;
    let endReason = "connection closed";
    const reader = new FrameReader(MAX_HELLO_PAYLOAD);
    const settle = () => {
      if (agent !== null || timer === undefined) return;
      clearTimeout(timer);
      timer = undefined;
      waiting.delete(socket);
    };
    /** The hello is taken: the key is spent, and the connection is the container's agent. */
    const take = (
      name: string,
      from: Socket,
      hello: Extract<AgentFrame, { type: "hello" }>,
      proved: boolean,
    ): AgentConnection => {
      // Two connections showed the key (one a task's that read it): the first proved is the agent.
      if (agents.has(name)) throw new AgentRefusal(`container ${name}: its agent is connected already`);
      settle();
      keys.delete(name);
      rmSync(join(keysDir, name), { force: true });
      const taken = new AgentConnection(from, hello);
      agents.set(name, taken);
      reader.limit = MAX_PAYLOAD;
      if (proved) from.write(encodeRunnerFrame({ type: "welcome" }));
      if (agents.size === expected.size) stopListening();
      for (const wake of helloWaiters) wake();
      return taken;
    };
    let timer: NodeJS.Timeout | undefined = setTimeout(() => {
      refuse(`a connection that said no hello within ${helloMs} ms`);
      socket.destroy();
    }, helloMs);
    const onData = (chunk: Buffer) => {
      try {
        let rest = chunk;
        // The key first, checked before a byte of a frame is decoded.
        if (container === null) {
          const take = Math.min(KEY_LENGTH - preamble.length, rest.length);
          preamble = Buffer.concat([preamble, rest.subarray(0, take)]);
          rest = rest.subarray(take);
          if (preamble.length < KEY_LENGTH) return;
          container = containerOfKey(preamble);
          if (container === null) throw new AgentRefusal("a connection without a valid key");
        }
        for (const [code, payload] of reader.push(rest)) {
          if (agent) {
            agent.receive(decodeAgentFrame(code, payload));
            continue;
          }
          const uid = options.uids?.[container];
          if (proving) {
            if (code !== "N")
              throw new AgentRefusal(`container ${container}: no answer to the proof of its user`);
            decodeAgentFrame(code, payload);
            const problem = proofProblem(proving.hello.pid, proving.nonce, uid as number);
            if (problem !== null) throw new AgentRefusal(`container ${container}: ${problem}`);
            agent = take(container, socket, proving.hello, true);
            continue;
          }
          if (code !== "H") throw new AgentRefusal(`container ${container}: first frame is not hello`);
          const frame = decodeAgentFrame(code, payload);
          if (frame.type !== "hello" || frame.container !== container) {
            throw new AgentRefusal(`container ${container}: hello names another container than its key`);
          }
          if (uid === undefined) {
            agent = take(container, socket, frame, false);
            continue;
          }
          if (frame.uid !== uid) {
            throw new AgentRefusal(
              `container ${container}: hello from user ${frame.uid}, not the container's ${uid}`,
            );
          }
          // The key alone is not enough where tasks may run before every agent is in: a task of
          // another container may have read it. The agent proves its user first.
          proving = { hello: frame, nonce: newNonce() };
          socket.write(encodeRunnerFrame({ type: "prove", nonce: proving.nonce }));
        }
        // Every frame of this read is decoded and what it carries copied: the read can go now.
        reader.release();
      } catch (error) {
        const message = (error as Error).message;
        if (agent === null) refuse(message);
        endReason = `protocol error: ${message}`;
        socket.destroy();
      }
    };
    socket.on("data", onData);
    socket.on("error", (error) => {
      endReason = `connection error: ${error.message}`;
    });
    socket.on("close", () => {
      sockets.delete(socket);
      settle();
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
  chmodSync(socketPath, mode);
  if (options.group !== undefined) {
    for (const path of [socketPath, keysDir, ...[...keys.keys()].map((name) => join(keysDir, name))]) {
      chownSync(path, -1, options.group);
    }
  }

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
    readyFor(container: string, timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
      return new Promise((resolve) => {
        const done = (taken: boolean) => {
          clearTimeout(timer);
          helloWaiters.delete(check);
          signal?.removeEventListener("abort", aborted);
          resolve(taken);
        };
        const check = () => {
          if (agents.has(container)) done(true);
        };
        const aborted = () => done(false);
        const timer = setTimeout(() => done(false), timeoutMs);
        helloWaiters.add(check);
        signal?.addEventListener("abort", aborted, { once: true });
        if (signal?.aborted) aborted();
        else check();
      });
    },
    agent(container: string): Agent {
      const agent = agents.get(container);
      if (!agent) throw new Error(`no agent connected for container ${container}`);
      return agent;
    },
    agents: () => [...agents.values()],
    refusals: () => [...refusals],
    stopListening,
    async close(): Promise<void> {
      stopListening();
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
