// Who may connect to the agents' socket: the key files one per expected container, the nonce a
// connection's agent must show, and the proof read from /proc that it runs as its container's user.

import { randomBytes } from "node:crypto";
import { closeSync, constants, mkdirSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";

/** A 15-character nonce of letters and digits (about 89 bits), which the agent takes as its name. */
export function newNonce(): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  return [...randomBytes(15)].map((byte) => alphabet[byte % alphabet.length]).join("");
}

/**
 * Why the process a hello names is not proved to be its container's agent, or null when it is:
 * its name and its user, read together in /proc/PID/status, must be the nonce sent on this
 * connection alone and the container's user. A process's name is its own to set, so only a
 * process of that user which took the nonce from this connection can show it.
 */
export function proofProblem(pid: number, nonce: string, uid: number): string | null {
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

/** A connection turned away before its hello was taken. */
export class AgentRefusal extends Error {
  override name = "AgentRefusal";
}

/** Bytes of a connection's key: hex of 32 random bytes, sent before anything else. */
export const KEY_LENGTH = 64;
/** The folder beside the socket that holds one key file per expected container. */
export const KEYS_DIR = "keys";

/**
 * The key files: one per expected container, readable by the agents (the pod's group) and no
 * one else, created exclusively and never through a symlink. Each is removed once its agent said
 * hello, and all of them once every agent did: no task ever finds one.
 */
export function writeKeys(dir: string, names: Iterable<string>, mode: number): Map<string, Buffer> {
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
