import { describe, expect, it } from "vitest";
import { formatDuration, parseDuration } from "../../src/api/duration.js";

describe("Go-style durations", () => {
  it.each([
    ["90s", 90_000],
    ["10m", 600_000],
    ["1h30m", 5_400_000],
    ["250ms", 250],
    ["1.5h", 5_400_000],
    ["0", 0],
    ["0s", 0],
    ["2h45m30.5s", 9_930_500],
    ["1500us", 2],
  ])("parses %s as %i ms", (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each([["100us"], ["1ns"], ["0.4ms"]])(
    "never rounds the positive duration %s to 0s, which would turn a stall limit off",
    (text) => {
      expect(parseDuration(text)).toBe(1);
    },
  );

  it.each([
    ["1x", "is not a duration"],
    ["-5s", "must not be negative"],
    ["", "not an empty string"],
    ["10", "is not a duration"],
    ["1h 30m", "is not a duration"],
    ["s", "is not a duration"],
  ])("refuses %j", (text, message) => {
    expect(() => parseDuration(text)).toThrow(message);
  });

  it.each([["90x"], ["-5s"], ["1h 30m"], [""]])("names %j once in its error, quoted", (text) => {
    const message = (() => {
      try {
        parseDuration(text);
      } catch (error) {
        return (error as Error).message;
      }
      return "";
    })();
    expect(message.startsWith(`${JSON.stringify(text)} `)).toBe(true);
    expect(message.split(JSON.stringify(text))).toHaveLength(2);
  });

  it.each([
    [5_400_000, "1h30m"],
    [90_000, "1m30s"],
    [600_000, "10m"],
    [250, "250ms"],
    [1_500, "1.5s"],
    [0, "0s"],
    [3_600_000, "1h"],
  ])("formats %i ms as %s", (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
    expect(parseDuration(text)).toBe(ms);
  });
});
