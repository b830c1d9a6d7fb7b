import { LOCAL_DEFAULTS } from "../../api/limits.js";
import { HistoryError, type PlaybookHistory, readHistory } from "./history.js";
import {
  AdviseFlags,
  AdviseInputError,
  parsed,
  printAdvice,
  readAdviseManifest,
  requestOf,
} from "./request.js";

export { AdviseInputError };

export function adviseCommand(flags: unknown): number {
  const f = parsed(AdviseFlags, flags);
  const request = requestOf(f);
  const manifest = f.filename
    ? { playbook: readAdviseManifest(f.filename, LOCAL_DEFAULTS), file: f.filename }
    : null;
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
