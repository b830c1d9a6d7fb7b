import { describe, expect, it } from "vitest";
import { helpfulProblem } from "../../src/cli/problems.js";

describe("manifest problems as the CLI shows them", () => {
  it.each([
    ["spec.tasks[0].timout", "unknown field; did you mean timeout?"],
    ["spec.ceilng", "unknown field; did you mean ceiling?"],
    ["spec.tasks[2].env[0].vaule", "unknown field; did you mean value?"],
    ["spec.killgrace", "unknown field; did you mean killGrace?"],
    ["metadata.nmae", "unknown field; did you mean name?"],
    // Nothing near enough: no guess.
    ["spec.tasks[0].colour", "unknown field"],
    ["spec.resources.limits.cpu.extra", "unknown field"],
  ])("%s: %s", (path, message) => {
    expect(helpfulProblem({ path, message: "unknown field" })).toEqual({ path, message });
  });

  it("drops the position a YAML message repeats, and its trailing colon", () => {
    expect(
      helpfulProblem({
        path: "line 2, column 1",
        message:
          "YAML: Flow sequence in block collection must be sufficiently indented and end with a ] at line 2, column 1:",
      }),
    ).toEqual({
      path: "line 2, column 1",
      message: "YAML: Flow sequence in block collection must be sufficiently indented and end with a ]",
    });
  });
});
