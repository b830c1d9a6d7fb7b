import { describe, expect, it } from "vitest";
import { median, meetsTarget, percentile, perMinute, ratio, spread } from "../bench/stats.js";

describe("benchmark statistics", () => {
  it.each([
    { p: 50, values: [5, 1, 4, 2, 3], expected: 3 },
    { p: 99, values: [5, 1, 4, 2, 3], expected: 5 },
    { p: 0, values: [5, 1, 4, 2, 3], expected: 1 },
    { p: 100, values: [5, 1, 4, 2, 3], expected: 5 },
    { p: 50, values: [10, 20], expected: 10 },
    { p: 90, values: Array.from({ length: 100 }, (_, i) => i + 1), expected: 90 },
    { p: 99, values: Array.from({ length: 100 }, (_, i) => i + 1), expected: 99 },
    { p: 99, values: [7], expected: 7 },
  ])(
    "takes the nearest-rank p$p of $values.length values, never interpolating",
    ({ p, values, expected }) => {
      expect(percentile(values, p)).toBe(expected);
    },
  );

  it("leaves the sample it was given in its order", () => {
    const values = [3, 1, 2];
    expect(median(values)).toBe(2);
    expect(values).toEqual([3, 1, 2]);
  });

  it("refuses an empty sample and a percentile outside 0..100", () => {
    expect(() => percentile([], 50)).toThrow(/empty/);
    expect(() => percentile([1], 101)).toThrow(/0\.\.100/);
  });

  it("divides ours by the reference, and has no ratio without both", () => {
    expect(ratio(300, 150)).toBe(2);
    expect(ratio(0.5, 2)).toBe(0.25);
    expect(ratio(1, 0)).toBeNull();
    expect(ratio(null, 2)).toBeNull();
    expect(ratio(2, null)).toBeNull();
    expect(ratio(Number.NaN, 2)).toBeNull();
  });

  it.each([
    { value: 1.0, target: "<= 1.0", met: true },
    { value: 1.01, target: "<= 1.0", met: false },
    { value: 0.7, target: ">= 0.7", met: true },
    { value: 0.69, target: ">= 0.7", met: false },
    { value: 2, target: "<= 2", met: true },
    { value: null, target: "<= 2.0", met: null },
  ])("judges $value against $target", ({ value, target, met }) => {
    expect(meetsTarget(value, target)).toBe(met);
  });

  it("refuses a target that is not a bound", () => {
    expect(() => meetsTarget(1, "about 1")).toThrow(/not "<= N" or ">= N"/);
  });

  it("turns a count over a span into a rate per minute", () => {
    expect(perMinute(100, 30_000)).toBe(200);
    expect(() => perMinute(1, 0)).toThrow(/not positive/);
  });

  it("gives a sample's size and nearest-rank p10, p25, p50, p75 and p90", () => {
    const values = Array.from({ length: 20 }, (_, i) => 20 - i);
    expect(spread(values)).toEqual({ n: 20, p10: 2, p25: 5, p50: 10, p75: 15, p90: 18 });
  });
});
