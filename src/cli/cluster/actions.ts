// What submit, wait, cancel, logs, describe and cron trigger do: connect as kubectl would, call the API server, and end
// with the outcome's exit code (exit-codes.ts). Every failure is a ClusterError or FlagError whose
// message is all the user sees (program.ts prints it).
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { type LimitDefaults, LOCAL_DEFAULTS } from "../../api/limits.js";
import { readManifestDocument, validatePlaybook } from "../../api/manifest.js";
import { escapeControls } from "../../api/visible-text.js";
import { EXIT, exitCodeForReason } from "../exit-codes.js";
import { printObject } from "../print-object.js";
import { type Cluster, ClusterError, connect } from "./connection.js";
import { triggerCronPlaybook } from "./cron-trigger.js";
import {
  CancelFlags,
  CronTriggerFlags,
  FlagError,
  LogsFlags,
  parseFlags,
  SubmitFlags,
  WaitFlags,
} from "./flags.js";
import {
  type ClusterPlaybook,
  cancelPlaybook,
  createPlaybook,
  getPlaybook,
  RESOURCE,
  terminalMessage,
  terminalReason,
  watchPlaybook,
} from "./playbooks.js";

/**
 * A manifest for the cluster is checked as a local one is, but against no ceiling of this
 * machine's: the controller's defaults and maximums are the cluster's (it refuses with InvalidSpec).
 */
const SUBMIT_DEFAULTS: LimitDefaults = {
  ...LOCAL_DEFAULTS,
  ceilingMs: Number.MAX_SAFE_INTEGER,
  maxCeilingMs: Number.MAX_SAFE_INTEGER,
  maxKillGrace: undefined,
  // The cluster's defaults and maximums decide: a finally timeout is not held to this machine's.
  finallyCeilingMs: Number.MAX_SAFE_INTEGER,
  maxFinallyCeiling: undefined,
};

function readManifestText(file: string): string {
  try {
    return file === "-" ? readFileSync(0, "utf8") : readFileSync(file, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const what = code === "ENOENT" ? "no such file" : `cannot read: ${code ?? (error as Error).message}`;
    throw new FlagError(`-f ${file}: ${what}${file === "-" ? "" : ` (${resolve(file)})`}`);
  }
}

export async function submitCommand(rawFlags: unknown): Promise<number> {
  const flags = parseFlags(SubmitFlags, rawFlags);
  if (flags.cancelOnInterrupt && !flags.watch) throw new FlagError("--cancel-on-interrupt needs --watch");
  const text = readManifestText(flags.filename);
  // What the file says is sent, as kubectl sends it: the check adds nothing to it.
  const body = readManifestDocument(text, flags.filename) as { metadata: { namespace?: string } };
  const checked = validatePlaybook(body, SUBMIT_DEFAULTS, flags.filename, { generateName: true });
  const own = checked.metadata.namespace;
  if (own && flags.namespace && own !== flags.namespace) {
    throw new FlagError(
      `-n ${flags.namespace}: the manifest's metadata.namespace is ${own} (${flags.filename}); they must agree`,
    );
  }
  const cluster = connect({ ...flags, namespace: flags.namespace ?? own });
  const created = await createPlaybook(cluster, body);
  const name = created.metadata.name;
  if (!flags.watch) {
    if (flags.output) printObject(created, flags.output);
    else process.stdout.write(`${name}\n`);
    return EXIT.succeeded;
  }
  if (!flags.output) process.stdout.write(`${name}\n`);
  const { watchRun } = await import("./watch.js");
  return watchRun({
    cluster,
    name,
    output: flags.output,
    cancelOnInterrupt: flags.cancelOnInterrupt === true,
    progressOut: process.stderr,
    taskOut: flags.output ? process.stderr : process.stdout,
    tty: Boolean(process.stderr.isTTY),
  });
}

type Ended =
  | { kind: "ended"; playbook: ClusterPlaybook; reason: string }
  | { kind: "timeout"; playbook: ClusterPlaybook | undefined }
  | { kind: "interrupted"; playbook: ClusterPlaybook | undefined };

/**
 * Follows the Playbook until its Succeeded condition is True or False, the timeout passes or
 * Ctrl-C; a Playbook that is not there at the start is not found, one that goes away while
 * followed is a lost outcome.
 */
async function waitForEnd(cluster: Cluster, name: string, timeoutMs: number | undefined): Promise<Ended> {
  const stop = new AbortController();
  let latest: ClusterPlaybook | undefined;
  let result: Ended | undefined;
  let deleted = false;
  const finish = (ended: Ended) => {
    result ??= ended;
    stop.abort();
  };
  const timer =
    timeoutMs === undefined
      ? undefined
      : setTimeout(() => finish({ kind: "timeout", playbook: latest }), timeoutMs);
  const onInterrupt = () => finish({ kind: "interrupted", playbook: latest });
  process.once("SIGINT", onInterrupt);
  process.once("SIGTERM", onInterrupt);
  try {
    await watchPlaybook(
      cluster,
      name,
      (playbook) => {
        if (playbook === null) {
          deleted = true;
          stop.abort();
          return;
        }
        latest = playbook;
        const reason = terminalReason(playbook);
        if (reason !== undefined) finish({ kind: "ended", playbook, reason });
      },
      stop.signal,
    );
  } finally {
    clearTimeout(timer);
    process.removeListener("SIGINT", onInterrupt);
    process.removeListener("SIGTERM", onInterrupt);
  }
  if (result) return result;
  const object = `${RESOURCE} ${name} in namespace ${cluster.namespace}`;
  const where = `(context ${cluster.context}, server ${cluster.server})`;
  if (deleted && latest === undefined)
    throw new ClusterError(`get ${object}: not found ${where}`, EXIT.invalid);
  throw new ClusterError(`${object} was deleted while waiting for its run to end ${where}`, EXIT.lost);
}

/** The line a finished wait ends with, on stderr: the outcome in the status's words. */
function endedLine(playbook: ClusterPlaybook, reason: string): string {
  const message = terminalMessage(playbook);
  // One line whatever the status says (an older controller's message may hold a newline).
  const line = `playbook: ${playbook.metadata.name} ${playbook.status?.phase ?? "ended"} (${reason})${message ? `: ${message}` : ""}`;
  return `${escapeControls(line)}\n`;
}

async function settle(
  cluster: Cluster,
  name: string,
  timeoutMs: number | undefined,
  timeoutFlag: string,
  output: "json" | "yaml" | undefined,
  invokedAs: string,
): Promise<number> {
  const ended = await waitForEnd(cluster, name, timeoutMs);
  if (ended.playbook && output) printObject(ended.playbook, output);
  const namespace = cluster.namespace === "default" ? "" : ` -n ${cluster.namespace}`;
  const hints = `the run goes on: \`${invokedAs} wait ${name}${namespace}\` again, \`${invokedAs} logs -f ${name}${namespace}\`, or \`${invokedAs} cancel ${name}${namespace}\``;
  switch (ended.kind) {
    case "ended":
      process.stderr.write(endedLine(ended.playbook, ended.reason));
      return exitCodeForReason(ended.reason);
    case "timeout":
      process.stderr.write(
        `playbook: ${name} has not ended within --timeout ${timeoutFlag} (phase ${ended.playbook?.status?.phase ?? "Pending"}); ${hints}\n`,
      );
      return EXIT.waitTimedOut;
    case "interrupted":
      process.stderr.write(`playbook: stopped waiting for ${name}; ${hints}\n`);
      return EXIT.interrupted;
  }
}

export async function waitCommand(rawFlags: unknown, invokedAs: string): Promise<number> {
  const flags = parseFlags(WaitFlags, rawFlags);
  const cluster = connect(flags);
  return settle(cluster, flags.name, flags.timeout, timeoutText(rawFlags), flags.output, invokedAs);
}

function timeoutText(rawFlags: unknown): string {
  return String((rawFlags as { timeout?: unknown }).timeout ?? "");
}

export async function cancelCommand(rawFlags: unknown, invokedAs: string): Promise<number> {
  const flags = parseFlags(CancelFlags, rawFlags);
  if (flags.timeout !== undefined && !flags.wait) throw new FlagError("--timeout needs --wait");
  const cluster = connect(flags);
  const current = await getPlaybook(cluster, flags.name);
  const reason = terminalReason(current);
  if (reason !== undefined) {
    // An ended run is left as it is: there is nothing to cancel, and its spec stays as it ran.
    process.stderr.write(`playbook: ${flags.name} had already ended; nothing to cancel\n`);
    if (!flags.wait) return EXIT.succeeded;
    if (flags.output) printObject(current, flags.output);
    process.stderr.write(endedLine(current, reason));
    return exitCodeForReason(reason);
  }
  const patched = await cancelPlaybook(cluster, flags.name);
  process.stderr.write(`playbook: ${flags.name} cancel requested (spec.cancel: true)\n`);
  if (!flags.wait) {
    if (flags.output) printObject(patched, flags.output);
    return EXIT.succeeded;
  }
  return settle(cluster, flags.name, flags.timeout, timeoutText(rawFlags), flags.output, invokedAs);
}

export async function logsCommand(rawFlags: unknown): Promise<number> {
  const flags = parseFlags(LogsFlags, rawFlags);
  const cluster = connect(flags);
  const { showLogs } = await import("./logs.js");
  return showLogs({
    cluster,
    name: flags.name,
    follow: flags.follow === true,
    task: flags.task,
    attempt: flags.attempt,
    out: process.stdout,
  });
}

export async function describeCommand(rawFlags: unknown): Promise<number> {
  const { showDescription } = await import("./describe.js");
  return showDescription(rawFlags);
}

/** How long `cron trigger` waits for the controller's answer without --timeout. */
export const CRON_TRIGGER_TIMEOUT_MS = 30_000;

export async function cronTriggerCommand(rawFlags: unknown): Promise<number> {
  const flags = parseFlags(CronTriggerFlags, rawFlags);
  const given = (rawFlags as { timeout?: unknown }).timeout;
  // Absent: 30 s; --timeout 0s: no limit, as for wait.
  const timeoutMs = given === undefined ? CRON_TRIGGER_TIMEOUT_MS : flags.timeout;
  const cluster = connect(flags);
  return triggerCronPlaybook(cluster, flags.name, timeoutMs, given === undefined ? "30s" : String(given));
}
