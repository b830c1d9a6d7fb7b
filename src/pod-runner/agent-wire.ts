// The agent's wire protocol (docs/agent.md): frames of `1 byte type | 4 bytes big-endian length |
// payload`, payload at most 1 MiB, text fields separated by NUL. Pure: no sockets here, so the codec
// is tested on bytes alone. Decoded payloads are checked with zod; a frame that does not parse
// throws AgentWireError, and the hub treats its agent as broken.
import { z } from "zod";
import { shellWords } from "../api/shell.js";
import { freeChunk } from "./spent-chunks.js";

export const MAX_PAYLOAD = 1 << 20;
/** The most a peer may send before its hello is taken: a hello with a large image environment. */
export const MAX_HELLO_PAYLOAD = 64 << 10;
const HEADER = 5;

export class AgentWireError extends Error {
  override name = "AgentWireError";
}

/** What an agent says. Task ids are the 32-bit numbers the runner chose in its start frame. */
export type AgentFrame =
  | {
      type: "hello";
      container: string;
      pid: number;
      uid: number;
      shell: string;
      /** the agent's own environment (its image's ENV, what the kubelet set): tasks start from it */
      env: Record<string, string>;
    }
  | { type: "started"; id: number; pid: number }
  | { type: "stdout" | "stderr"; id: number; data: Buffer }
  | { type: "closed"; id: number; stream: "out" | "err" }
  | {
      type: "exited";
      id: number;
      code: number | null;
      signal: string | null;
      /** the leader's rusage from wait4 (with what it reaped), where the agent sent it */
      usage?: AgentUsage;
    }
  | { type: "fenced"; alive: number }
  | { type: "error"; id: number | null; text: string }
  /** the agent took the runner's nonce as its process name (its answer to `prove`) */
  | { type: "named" };

/** An attempt's cost as wait4 measured it: CPU user + system in µs, the peak RSS in KiB (ru_maxrss). */
export interface AgentUsage {
  cpuMicros: number;
  maxRssKiB: number;
}

/** More CPU than ten years of 1024 cores, or more memory than 1 PiB, is no measure: the frame is refused. */
export const MAX_CPU_MICROS = 10 * 366 * 24 * 3600 * 1_000_000 * 1024;
export const MAX_RSS_KIB = 2 ** 40;

/** What the runner tells an agent. */
export type RunnerFrame =
  | {
      type: "start";
      id: number;
      cwd: string;
      run: string;
      /** the task's shell words (`bash -eo pipefail`), run as `WORDS... -c RUN`; empty: the agent's default */
      shell: string[];
      env: Record<string, string>;
    }
  | { type: "kill"; target: KillTarget; signal: string }
  | { type: "fence"; spare: number[] }
  | { type: "quit" }
  /** before a hello is taken: take this nonce as your process name, and say so */
  | { type: "prove"; nonce: string }
  /** the hello is taken: the agent takes its own name back */
  | { type: "welcome" };

/** `-PGID` (a group), `PID` (one process) or `tree` (every descendant of the agent). */
export type KillTarget = number | "tree";

const AGENT_CODES = {
  hello: "H",
  started: "P",
  stdout: "O",
  stderr: "E",
  closed: "C",
  exited: "X",
  fenced: "F",
  error: "R",
  named: "N",
} as const;
const RUNNER_CODES = { start: "S", kill: "K", fence: "Z", quit: "Q", prove: "N", welcome: "W" } as const;
/** A nonce the agent takes as its process name: at most 15 bytes (the kernel's TASK_COMM_LEN - 1). */
export const NONCE_PATTERN = /^[A-Za-z0-9]{1,15}$/;

const decimal = z.string().regex(/^\d+$/).transform(Number);
const taskId = decimal.refine((n) => n <= 0xffffffff, "task id over 32 bits");
const signedPid = z
  .string()
  .regex(/^-?\d+$/)
  .transform(Number);
const signalName = z.string().regex(/^(SIG[A-Z0-9]+|\d+)$/);

const helloFields = z.tuple(
  [z.string().min(1), decimal, decimal, z.string().min(1)],
  z.string().regex(/^[^=]+=/, "an environment entry NAME=VALUE"),
);
const startedFields = z.tuple([taskId, decimal]);
const closedFields = z.tuple([taskId, z.enum(["out", "err"])]);
const boundedDecimal = (max: number, what: string) =>
  z
    .string()
    .regex(/^\d{1,20}$/, `${what}: a decimal number`)
    .transform(Number)
    .refine((n) => n <= max, `${what} over ${max}`);
// CPU µs and peak RSS KiB are optional: an agent built before them sends three fields.
const exitedFields = z.union([
  z.tuple([taskId, z.union([z.literal(""), decimal]), z.union([z.literal(""), signalName])]),
  z.tuple([
    taskId,
    z.union([z.literal(""), decimal]),
    z.union([z.literal(""), signalName]),
    boundedDecimal(MAX_CPU_MICROS, "cpu µs"),
    boundedDecimal(MAX_RSS_KIB, "maxrss KiB"),
  ]),
]);
const fencedFields = z.tuple([decimal]);
const errorFields = z.tuple([z.union([z.literal(""), taskId]), z.string()]);
const startFields = z
  .tuple(
    [taskId, z.string().min(1), z.string(), z.string()],
    z.string().regex(/^[^=]+=/, "an env entry is K=V"),
  )
  .transform(([id, cwd, run, shell, ...entries]) => ({ id, cwd, run, shell: shellWords(shell), entries }));
const killFields = z.tuple([z.union([z.literal("tree"), signedPid]), signalName]);

function fields(payload: Buffer): string[] {
  return payload.toString("utf8").split("\0");
}

function textPayload(values: readonly string[]): Buffer {
  for (const value of values) {
    if (value.includes("\0")) throw new AgentWireError(`a field holds a NUL byte: ${JSON.stringify(value)}`);
  }
  return Buffer.from(values.join("\0"), "utf8");
}

function frame(code: string, payload: Buffer): Buffer {
  if (payload.length > MAX_PAYLOAD) {
    throw new AgentWireError(`payload of ${payload.length} bytes is over the limit of ${MAX_PAYLOAD}`);
  }
  const head = Buffer.alloc(HEADER);
  head.write(code, 0, "latin1");
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

// A bad frame is named by its shape, never echoed: its bytes are whatever a peer sent, and an
// error message travels into logs and reports.
function parse<T>(schema: z.ZodType<T>, values: string[], what: string): T {
  const result = schema.safeParse(values);
  if (!result.success) {
    const issue = result.error.issues[0];
    const at = issue && issue.path.length > 0 ? ` field ${issue.path.join(".")}` : "";
    throw new AgentWireError(`bad ${what} frame (${values.length} fields):${at} ${issue?.message}`);
  }
  return result.data;
}

function checkTaskId(id: number): void {
  if (!Number.isInteger(id) || id < 0 || id > 0xffffffff) throw new AgentWireError(`bad task id ${id}`);
}

export function encodeRunnerFrame(message: RunnerFrame): Buffer {
  const code = RUNNER_CODES[message.type];
  switch (message.type) {
    case "start": {
      checkTaskId(message.id);
      const env = Object.entries(message.env).map(([key, value]) => {
        if (key === "" || key.includes("=")) throw new AgentWireError(`bad env name ${JSON.stringify(key)}`);
        return `${key}=${value}`;
      });
      // The shell's words joined by spaces: no word holds one (shell.ts splits on them).
      if (message.shell.some((word) => word === "" || /[\0 ]/.test(word))) {
        throw new AgentWireError(`bad shell word in ${JSON.stringify(message.shell)}`);
      }
      return frame(
        code,
        textPayload([String(message.id), message.cwd, message.run, message.shell.join(" "), ...env]),
      );
    }
    case "kill": {
      const target = message.target === "tree" ? "tree" : String(message.target);
      return frame(code, textPayload([target, message.signal]));
    }
    case "fence":
      return frame(code, textPayload(message.spare.map(String)));
    case "quit":
    case "welcome":
      return frame(code, Buffer.alloc(0));
    case "prove":
      if (!NONCE_PATTERN.test(message.nonce)) throw new AgentWireError("bad nonce");
      return frame(code, Buffer.from(message.nonce, "latin1"));
  }
}

export function decodeRunnerFrame(code: string, payload: Buffer): RunnerFrame {
  switch (code) {
    case "S": {
      const { id, cwd, run, shell, entries } = parse(startFields, fields(payload), "start");
      const env: Record<string, string> = {};
      for (const entry of entries) {
        const at = entry.indexOf("=");
        env[entry.slice(0, at)] = entry.slice(at + 1);
      }
      return { type: "start", id, cwd, run, shell, env };
    }
    case "K": {
      const [target, signal] = parse(killFields, fields(payload), "kill");
      return { type: "kill", target, signal };
    }
    case "Z":
      return {
        type: "fence",
        spare: payload.length === 0 ? [] : parse(z.array(decimal), fields(payload), "fence"),
      };
    case "Q":
      return { type: "quit" };
    case "N": {
      const nonce = payload.toString("latin1");
      if (!NONCE_PATTERN.test(nonce)) throw new AgentWireError("bad nonce frame");
      return { type: "prove", nonce };
    }
    case "W":
      return { type: "welcome" };
    default:
      throw new AgentWireError(`unknown runner frame type ${JSON.stringify(code)}`);
  }
}

function streamPayload(id: number, data: Buffer): Buffer {
  checkTaskId(id);
  const head = Buffer.alloc(4);
  head.writeUInt32BE(id, 0);
  return Buffer.concat([head, data]);
}

export function encodeAgentFrame(message: AgentFrame): Buffer {
  const code = AGENT_CODES[message.type];
  switch (message.type) {
    case "hello":
      return frame(
        code,
        textPayload([
          message.container,
          String(message.pid),
          String(message.uid),
          message.shell,
          ...Object.entries(message.env).map(([name, value]) => `${name}=${value}`),
        ]),
      );
    case "started":
      return frame(code, textPayload([String(message.id), String(message.pid)]));
    case "stdout":
    case "stderr":
      return frame(code, streamPayload(message.id, message.data));
    case "closed":
      return frame(code, textPayload([String(message.id), message.stream]));
    case "exited":
      return frame(
        code,
        textPayload([
          String(message.id),
          message.code === null ? "" : String(message.code),
          message.signal ?? "",
          ...(message.usage ? [String(message.usage.cpuMicros), String(message.usage.maxRssKiB)] : []),
        ]),
      );
    case "fenced":
      return frame(code, textPayload([String(message.alive)]));
    case "error":
      return frame(code, textPayload([message.id === null ? "" : String(message.id), message.text]));
    case "named":
      return frame(code, Buffer.alloc(0));
  }
}

export function decodeAgentFrame(code: string, payload: Buffer): AgentFrame {
  switch (code) {
    case "H": {
      const [container, pid, uid, shell, ...entries] = parse(helloFields, fields(payload), "hello");
      const env: Record<string, string> = {};
      for (const entry of entries) {
        const at = entry.indexOf("=");
        env[entry.slice(0, at)] = entry.slice(at + 1);
      }
      return { type: "hello", container, pid, uid, shell, env };
    }
    case "P": {
      const [id, pid] = parse(startedFields, fields(payload), "started");
      return { type: "started", id, pid };
    }
    case "O":
    case "E": {
      if (payload.length < 4)
        throw new AgentWireError(`output frame of ${payload.length} bytes has no task id`);
      // A copy in a buffer of its own (not a slice of Node's shared pool): the socket's read is
      // freed once its frames are decoded (FrameReader.release), and this copy once the attempt
      // has passed it on (Launched.chunksOwned).
      const data = Buffer.allocUnsafeSlow(payload.length - 4);
      payload.copy(data, 0, 4);
      return { type: code === "O" ? "stdout" : "stderr", id: payload.readUInt32BE(0), data };
    }
    case "C": {
      const [id, stream] = parse(closedFields, fields(payload), "closed");
      return { type: "closed", id, stream };
    }
    case "X": {
      const [id, exitCode, signal, cpuMicros, maxRssKiB] = parse(exitedFields, fields(payload), "exited");
      return {
        type: "exited",
        id,
        code: exitCode === "" ? null : exitCode,
        signal: signal === "" ? null : signal,
        ...(cpuMicros !== undefined && maxRssKiB !== undefined ? { usage: { cpuMicros, maxRssKiB } } : {}),
      };
    }
    case "F": {
      const [alive] = parse(fencedFields, fields(payload), "fenced");
      return { type: "fenced", alive };
    }
    case "R": {
      const [id, text] = parse(errorFields, fields(payload), "error");
      return { type: "error", id: id === "" ? null : id, text };
    }
    case "N":
      if (payload.length !== 0)
        throw new AgentWireError(`named frame of ${payload.length} bytes is not empty`);
      return { type: "named" };
    default:
      throw new AgentWireError(`unknown agent frame type ${JSON.stringify(code)}`);
  }
}

/** Cuts a byte stream into frames; chunks may split or join frames anywhere. */
export class FrameReader {
  // Chunks of an unfinished frame are kept apart and joined once the frame is whole, so a frame
  // that arrives a byte at a time costs linear, not quadratic, copying.
  private chunks: Buffer[] = [];
  private size = 0;
  private need = HEADER;
  /** The buffers the frames given out and `chunks` are views of, until `release`. */
  private sources: Buffer[] = [];
  /** A frame was completed since the last `release`. */
  private completed = false;

  /**
   * The largest payload taken: a frame that announces more throws before any of it is kept.
   * The hub holds a peer that has not said hello to a small one (MAX_HELLO_PAYLOAD).
   */
  limit: number;

  constructor(limit = MAX_PAYLOAD) {
    this.limit = limit;
  }

  /** The whole frames completed by this chunk, as [type code, payload]. */
  push(chunk: Buffer): Array<[string, Buffer]> {
    this.chunks.push(chunk);
    this.sources.push(chunk);
    this.size += chunk.length;
    if (this.size >= HEADER && this.need === HEADER) this.need = HEADER + this.peekLength();
    if (this.size < this.need) return [];
    const pending = this.chunks.length === 1 ? chunk : Buffer.concat(this.chunks, this.size);
    if (pending !== chunk) this.sources.push(pending);
    this.completed = true;
    const frames: Array<[string, Buffer]> = [];
    let at = 0;
    while (pending.length - at >= HEADER) {
      const length = readLength(pending, at, this.limit);
      if (pending.length - at < HEADER + length) break;
      const code = String.fromCharCode(pending[at] as number);
      frames.push([code, pending.subarray(at + HEADER, at + HEADER + length)]);
      at += HEADER + length;
    }
    const rest = pending.subarray(at);
    this.chunks = rest.length > 0 ? [rest] : [];
    this.size = rest.length;
    this.need = rest.length >= HEADER ? HEADER + readLength(rest, 0, this.limit) : HEADER;
    return frames;
  }

  /**
   * The caller is done with the frames `push` returned (decoded, every payload it keeps copied):
   * the reads they came from are freed now, but for what holds an unfinished frame. A socket's reads
   * left to the GC pile up as external memory at a task's output rate (spent-chunks.ts).
   */
  release(): void {
    // Until a frame is whole every read is still held. After one, what is held is at most the
    // unfinished frame's start: one pass over the sources once a frame completed, so a frame that
    // comes a byte at a time stays linear.
    if (!this.completed) return;
    this.completed = false;
    const held = new Set(this.chunks.map((chunk) => chunk.buffer));
    for (const source of this.sources) if (!held.has(source.buffer)) freeChunk(source);
    this.sources = this.sources.filter((source) => held.has(source.buffer));
  }

  /** Bytes of a frame begun but not finished. */
  get buffered(): number {
    return this.size;
  }

  private peekLength(): number {
    const first = this.chunks[0];
    const head = first && first.length >= HEADER ? first : Buffer.concat(this.chunks, this.size);
    return readLength(head, 0, this.limit);
  }
}

function readLength(buffer: Buffer, at: number, limit: number): number {
  const length = buffer.readUInt32BE(at + 1);
  if (length > limit) throw new AgentWireError(`frame of ${length} bytes is over the limit of ${limit}`);
  return length;
}
