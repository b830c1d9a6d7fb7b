// `--log-format text`: pino's JSON records rewritten as one line each (time, level, message, then
// key=value fields) for people reading `kubectl logs` by eye. Written here rather than with
// pino-pretty so the controller image needs no extra dependency.
import type { DestinationStream } from "pino";
import { z } from "zod";

const LEVEL_NAMES: Record<number, string> = {
  10: "TRACE",
  20: "DEBUG",
  30: "INFO",
  40: "WARN",
  50: "ERROR",
  60: "FATAL",
};

const RecordSchema = z.looseObject({
  time: z.union([z.number(), z.string()]).optional(),
  level: z.number().optional(),
  msg: z.string().optional(),
});

/** Bare when it reads unambiguously, quoted (JSON) otherwise. */
function formatValue(value: unknown): string {
  if (typeof value === "string") return /^[^\s"=]+$/.test(value) ? value : JSON.stringify(value);
  if (typeof value === "number" || typeof value === "boolean" || value === null) return String(value);
  // pino's error serializer: the message is what a reader needs on one line.
  if (typeof value === "object" && "message" in value && "stack" in value) {
    return JSON.stringify(String(value.message));
  }
  return JSON.stringify(value) ?? String(value);
}

/** One pino JSON record as one text line, without the trailing newline. */
export function formatTextRecord(json: string): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch {
    return json.trimEnd();
  }
  const record = RecordSchema.safeParse(parsed);
  if (!record.success) return json.trimEnd();
  const { time, level, msg, ...fields } = record.data;
  const when = typeof time === "number" ? new Date(time).toISOString() : (time ?? "");
  const levelName = level === undefined ? "" : (LEVEL_NAMES[level] ?? String(level));
  const pairs = Object.entries(fields).map(([key, value]) => `${key}=${formatValue(value)}`);
  return [when, levelName.padEnd(5), msg ?? "", ...pairs].filter((part) => part !== "").join(" ");
}

/** A pino destination that writes each record as a text line to `out`. */
export function textDestination(out: NodeJS.WritableStream): DestinationStream {
  return {
    write(chunk: string) {
      // pino writes one record per call; split anyway so a batch never becomes one line.
      for (const line of chunk.split("\n")) if (line !== "") out.write(`${formatTextRecord(line)}\n`);
    },
  };
}
