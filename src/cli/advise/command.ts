// `playbook advise --reports DIR`: the limits each Playbook's local history supports (method.ts),
// with the evidence, a backtest and a patch it never applies.
import { readFileSync } from "node:fs";
import { LOCAL_DEFAULTS } from "../../api/limits.js";
import { readManifestDocument, validatePlaybook } from "../../api/manifest.js";
import type { Playbook } from "../../api/playbook.js";
import { HistoryError, type PlaybookHistory, readHistory } from "./history.js";
import { AdviseFlags, AdviseInputError, parsed, printAdvice, requestOf } from "./request.js";

export { AdviseInputError };

function readManifest(file: string): Playbook {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new AdviseInputError(
      `-f ${file}: ${code === "ENOENT" ? "no such file" : (code ?? (error as Error).message)}`,
    );
  }
  return validatePlaybook(readManifestDocument(text, file), LOCAL_DEFAULTS, file, { generateName: true });
}

export function adviseCommand(flags: unknown): number {
  const f = parsed(AdviseFlags, flags);
  const request = requestOf(f);
  const manifest = f.filename ? { playbook: readManifest(f.filename), file: f.filename } : null;
  let histories: PlaybookHistory[];
  try {
    histories = readHistory(f.reports, manifest);
  } catch (error) {
    if (error instanceof HistoryError) throw new AdviseInputError(error.message);
    throw error;
  }
  if (manifest) {
    // -f names the Playbook to advise on: its runs only.
    const name = histories.find((h) => h.playbook === manifest.playbook)?.name;
    histories = histories.filter((h) => h.name === name);
  }
  if (histories.length === 0 || histories.every((h) => h.runs.length === 0)) {
    throw new AdviseInputError(
      `--reports ${f.reports}: no finished run${manifest ? ` of ${manifest.playbook.metadata.name} (-f ${manifest.file})` : ""} in its .json, .yaml or .yml files`,
    );
  }
  return printAdvice(histories, request, { kind: "Playbook" });
}
