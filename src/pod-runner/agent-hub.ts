// The runner's end of the agents' socket (docs/agent.md). Each task container's agent connects to
// the unix socket the runner listens on and says hello; the runner then starts its tasks through
// it, reads their output and exit, and has it signal and sweep. Every decision stays with the
// caller: the hub only carries frames and matches answers to questions.

import { timingSafeEqual } from "node:crypto";
import { chmodSync, chownSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { dirname, join } from "node:path";
import { AgentRefusal, KEY_LENGTH, KEYS_DIR, newNonce, proofProblem, writeKeys } from "./agent-admission.js";
import { AgentConnection } from "./agent-connection.js";
import type { Agent } from "./agent-task.js";
import {
  type AgentFrame,
  decodeAgentFrame,
  encodeRunnerFrame,
  FrameReader,
  MAX_HELLO_PAYLOAD,
  MAX_PAYLOAD,
} from "./agent-wire.js";

export type { Agent, AgentExit, AgentTask, AgentTaskSpec } from "./agent-task.js";
export type { KillTarget } from "./agent-wire.js";

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

/** How long a connection may take to show its key and say hello. */
const DEFAULT_HELLO_MS = 10_000;

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
