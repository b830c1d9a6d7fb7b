// What the CLI adds to a manifest's problems so that they help: the nearest known field for an
// unknown one, and the YAML parser's message without the position it repeats.
import { z } from "zod";
import type { ManifestProblem } from "../api/manifest.js";
import { PlaybookSchema } from "../api/playbook.js";

/** "spec.tasks[0].timout" -> ["spec", "tasks", 0, "timout"] */
function parsePath(path: string): (string | number)[] {
  const parts: (string | number)[] = [];
  for (const match of path.matchAll(/([^.[\]]+)|\[(\d+)\]/g)) {
    if (match[2] !== undefined) parts.push(Number(match[2]));
    else if (match[1] !== undefined) parts.push(match[1]);
  }
  return parts;
}

function unwrap(schema: z.ZodType): z.ZodType {
  let current = schema;
  for (;;) {
    if (
      current instanceof z.ZodOptional ||
      current instanceof z.ZodNullable ||
      current instanceof z.ZodDefault
    ) {
      current = current.unwrap() as z.ZodType;
    } else if (current instanceof z.ZodPipe) {
      current = current.in as z.ZodType;
    } else {
      return current;
    }
  }
}

/** The field names the schema knows at a path, or none when the path leads nowhere known. */
export function knownFields(path: readonly (string | number)[]): string[] {
  let schema = unwrap(PlaybookSchema);
  for (const part of path) {
    if (typeof part === "number") {
      if (!(schema instanceof z.ZodArray)) return [];
      schema = unwrap(schema.element as z.ZodType);
    } else {
      if (!(schema instanceof z.ZodObject)) return [];
      const field = (schema.shape as Record<string, z.ZodType>)[part];
      if (!field) return [];
      schema = unwrap(field);
    }
  }
  return schema instanceof z.ZodObject ? Object.keys(schema.shape) : [];
}

/** Edits between two names (case aside), a swap of neighbours counting as one, as typos go. */
function editDistance(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  const d: number[][] = Array.from({ length: x.length + 1 }, (_, i) =>
    Array.from({ length: y.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  const at = (i: number, j: number): number => d[i]?.[j] ?? Number.POSITIVE_INFINITY;
  for (let i = 1; i <= x.length; i++) {
    const row = d[i] as number[];
    for (let j = 1; j <= y.length; j++) {
      const cost = x[i - 1] === y[j - 1] ? 0 : 1;
      let best = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost);
      if (i > 1 && j > 1 && x[i - 1] === y[j - 2] && x[i - 2] === y[j - 1])
        best = Math.min(best, at(i - 2, j - 2) + 1);
      row[j] = best;
    }
  }
  return at(x.length, y.length);
}

/** The known field nearest to a misspelt one, if one is near enough to be what was meant. */
export function nearestField(name: string, known: readonly string[]): string | undefined {
  let best: { field: string; distance: number } | undefined;
  for (const field of known) {
    const distance = editDistance(name, field);
    if (!best || distance < best.distance) best = { field, distance };
  }
  const tolerance = Math.max(1, Math.floor(name.length / 3));
  return best && best.distance <= tolerance ? best.field : undefined;
}

export function helpfulProblem(problem: ManifestProblem): ManifestProblem {
  if (problem.message === "unknown field") {
    const parts = parsePath(problem.path);
    const name = parts.at(-1);
    if (typeof name !== "string") return problem;
    const suggestion = nearestField(name, knownFields(parts.slice(0, -1)));
    return suggestion ? { ...problem, message: `unknown field; did you mean ${suggestion}?` } : problem;
  }
  if (problem.message.startsWith("YAML: ")) {
    // The parser ends its message with the position again ("... at line 2, column 1:").
    return {
      ...problem,
      message: problem.message.replace(/ at line \d+, column \d+:?\s*$/, "").replace(/:\s*$/, ""),
    };
  }
  return problem;
}
