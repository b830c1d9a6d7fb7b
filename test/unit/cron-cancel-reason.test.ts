// A run cancelled with a reason (a CronPlaybook's Replace) ends Cancelled with that reason first.
import { describe, expect, it } from "vitest";
import { ANNOTATION_CANCEL_REASON } from "../../src/api/playbook.js";
import { decide } from "../../src/controller/playbook/reconcile.js";
import { playbook, SETTINGS, T0 } from "./controller-fixtures.js";

describe("a cancel reason", () => {
  const why = "replaced by run nightly-29453940 (CronPlaybook nightly, concurrencyPolicy Replace)";

  it("begins the Cancelled condition's message and the RunCancelled event", () => {
    const cancelled = playbook({ cancel: true });
    cancelled.metadata.annotations = { [ANNOTATION_CANCEL_REASON]: why };
    const decision = decide({ playbook: cancelled, pods: [], now: T0, settings: SETTINGS });
    const succeeded = decision.status?.conditions?.find((c) => c.type === "Succeeded");
    expect(succeeded).toMatchObject({
      status: "False",
      reason: "Cancelled",
      message: `${why}; the run was cancelled (spec.cancel) before its pod was created`,
    });
    expect(decision.events).toContainEqual({
      type: "Normal",
      reason: "RunCancelled",
      message: `Run finished with reason Cancelled: ${why}; the run was cancelled (spec.cancel) before its pod was created`,
    });
  });

  it("leaves a run cancelled without one as it was", () => {
    const decision = decide({ playbook: playbook({ cancel: true }), pods: [], now: T0, settings: SETTINGS });
    expect(decision.status?.conditions?.find((c) => c.type === "Succeeded")?.message).toBe(
      "the run was cancelled (spec.cancel) before its pod was created",
    );
  });
});
