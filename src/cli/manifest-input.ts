// Reading the manifest from -f FILE or stdin (kept for the command started again as root).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { readManifestDocument } from "../api/manifest.js";
import { UsageError } from "./failure-message.js";

/** What went wrong reading a file, in words, with the path it looked at. */
export function describeReadError(error: unknown, file: string): string {
  const code = (error as NodeJS.ErrnoException).code;
  const words: Record<string, string> = {
    ENOENT: "no such file",
    EACCES: "permission denied",
    EISDIR: "is a directory",
    ENOTDIR: "a folder on the path is a file",
  };
  const what = (code && words[code]) ?? `cannot read: ${code ?? (error as Error).message}`;
  return file === "-" ? what : `${what} (${resolve(file)})`;
}

/**
 * Where `playbook run -f -` as root keeps the manifest it read from stdin for itself, started
 * again in a PID namespace: a file in a folder of its own that only root may read, removed once read.
 */
export const STDIN_MANIFEST_VAR = "PLAYBOOK_STDIN_MANIFEST";

/** The text of `-f -`: stdin, or what this command read from it before it started again. */
function readStdin(): string {
  const kept = process.env[STDIN_MANIFEST_VAR];
  if (kept === undefined) return readFileSync(0, "utf8");
  delete process.env[STDIN_MANIFEST_VAR];
  try {
    return readFileSync(kept, "utf8");
  } finally {
    rmSync(dirname(kept), { recursive: true, force: true });
  }
}

/** The manifest's one document as its YAML or JSON says it, unchecked. */
export function readDocument(file: string): unknown {
  let text: string;
  try {
    text = file === "-" ? readStdin() : readFileSync(file, "utf8");
  } catch (error) {
    throw new UsageError(`-f ${file}: ${describeReadError(error, file)}`);
  }
  return readManifestDocument(text, file);
}

/** Stdin's text, or the usage error `-f -` gives when it cannot be read. */
export function readStdinOrRefuse(): string {
  try {
    return readFileSync(0, "utf8");
  } catch (error) {
    throw new UsageError(`-f -: ${describeReadError(error, "-")}`);
  }
}

/** Keeps the text read from stdin for this command started again; returns how to forget it. */
export function keepStdin(text: string): () => void {
  const dir = mkdtempSync(join(tmpdir(), "playbook-stdin-"));
  const file = join(dir, "manifest");
  writeFileSync(file, text, { mode: 0o600 });
  process.env[STDIN_MANIFEST_VAR] = file;
  return () => {
    delete process.env[STDIN_MANIFEST_VAR];
    rmSync(dir, { recursive: true, force: true });
  };
}
