// What the real-node tests of the log archive print and look for: numbered 1 KiB lines from a
// task, the Playbook once its LogArchived condition settled, status.log, and the cap's cut.
import { createHash } from "node:crypto";
import { expect } from "vitest";
import { condition, getPlaybook, type PlaybookObject, taskLines } from "../controller/support.js";

/** `blocks` MiB of numbered 1 KiB lines, a MiB every `pauseMs`: the runner prefixes each with [gen]. */
export function generator(blocks: number, pauseMs: number): string {
  const script =
    "const pad='x'.repeat(1014); let i=0;" +
    "function step(){ let s=''; for(let j=0;j<1024;j++,i++) s+=String(i).padStart(8,'0')+' '+pad+'\\n';" +
    ` process.stdout.write(s, () => { if (i < ${blocks * 1024}) setTimeout(step, ${pauseMs}); }); }` +
    " step();";
  return `node -e "${script}"`;
}

/** The lines generator() prints, as the task printed them. */
export function generated(blocks: number): string[] {
  const pad = "x".repeat(1014);
  return Array.from({ length: blocks * 1024 }, (_, i) => `${String(i).padStart(8, "0")} ${pad}`);
}

export const sha256 = (bytes: Buffer) => createHash("sha256").update(bytes).digest("hex");

export type StatusLog = { bucket: string; key: string; bytes: number; sha256: string };
export const logOf = (playbook: PlaybookObject) => (playbook.status as { log?: StatusLog } | undefined)?.log;

/** The Playbook once its LogArchived condition is settled (True or False). */
export async function archived(ns: string, name: string, timeoutMs = 180_000): Promise<PlaybookObject> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const playbook = await getPlaybook(ns, name);
    const said = condition(playbook, "LogArchived");
    if (said && said.status !== "Unknown") return playbook;
    if (Date.now() > deadline)
      throw new Error(`${name}'s log archive did not settle: ${JSON.stringify(playbook.status)}`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/**
 * A capped object of generator(blocks)'s lines: one left-out line, the head from the first line
 * on and the tail to the last, each in order (the lines at the cut are partial), some left out.
 */
export function expectHeadAndTail(text: string, blocks: number): void {
  const marks = text.split("\n").filter((line) => line.includes("bytes of output left out here"));
  expect(marks).toHaveLength(1);
  const [head, tail] = text.split(marks[0] as string);
  const lines = generated(blocks);
  const headLines = taskLines(head as string, "gen");
  const tailLines = taskLines(tail as string, "gen");
  expect(headLines.slice(0, -1)).toEqual(lines.slice(0, headLines.length - 1));
  expect(tailLines.slice(1)).toEqual(lines.slice(lines.length - tailLines.length + 1));
  expect(headLines.length + tailLines.length).toBeLessThan(lines.length);
}
