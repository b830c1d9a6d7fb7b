// The Playbook status that a finished run's report stands for — built the same way by
// `playbook run -o json` and by the controller, so a laptop run and a cluster run read alike.
import { setFinishedConditions } from "./conditions.js";
import { describeRunLimits, type ResolvedLimits } from "./limits.js";
import type { Condition, PlaybookStatus } from "./playbook.js";
import type { RunnerReport } from "./report.js";
import { expandReport, type ReportContext } from "./report-expand.js";

export function statusFromReport(
  report: RunnerReport,
  limits: ResolvedLimits,
  now: Date,
  previous: readonly Condition[] = [],
  observedGeneration?: number,
  context: ReportContext = {},
): PlaybookStatus {
  const settled = expandReport(report, limits, context);
  const conditions = setFinishedConditions(
    previous,
    { reason: report.reason, message: settled.message },
    now,
    observedGeneration,
  );
  const status: PlaybookStatus = {
    phase: report.phase,
    startTime: settled.startTime,
    completionTime: settled.completionTime,
    limits: describeRunLimits(limits),
    tasks: settled.tasks,
    ...(settled.finally ? { finally: settled.finally } : {}),
    conditions,
  };
  if (observedGeneration !== undefined) status.observedGeneration = observedGeneration;
  return status;
}
