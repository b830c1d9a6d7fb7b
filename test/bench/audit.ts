// Counts the API server's audit log (Metadata level, one JSON event a line) by user, verb,
// resource and response code, over the part of the log a measurement wrote.
import { closeSync, openSync, readSync, statSync } from "node:fs";
import { z } from "zod";

const AuditEventSchema = z.looseObject({
  stage: z.string(),
  verb: z.string(),
  user: z.looseObject({ username: z.string() }),
  objectRef: z
    .looseObject({
      resource: z.string().optional(),
      subresource: z.string().optional(),
      namespace: z.string().optional(),
    })
    .optional(),
  responseStatus: z.looseObject({ code: z.number().int().optional() }).optional(),
});

export interface AuditRequest {
  user: string;
  verb: string;
  /** `pods`, `playbooks/status`, ... */
  resource: string;
  /** The object's namespace; undefined for a cluster-scoped one. */
  namespace: string | undefined;
  code: number;
}

const WRITE_VERBS = new Set(["create", "update", "patch", "delete", "deletecollection"]);

export const isWrite = (request: AuditRequest): boolean => WRITE_VERBS.has(request.verb);
/** Events are counted on their own; an object write is any other write. */
export const isEventWrite = (request: AuditRequest): boolean =>
  isWrite(request) && request.resource.split("/")[0] === "events";

/** The completed requests in the given lines; other stages and lines that do not parse are skipped. */
export function parseAuditLines(text: string): AuditRequest[] {
  const requests: AuditRequest[] = [];
  for (const line of text.split("\n")) {
    if (line.trim() === "") continue;
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch {
      continue; // A line being written as we read.
    }
    const event = AuditEventSchema.safeParse(json);
    if (!event.success || event.data.stage !== "ResponseComplete") continue;
    const { resource, subresource, namespace } = event.data.objectRef ?? {};
    requests.push({
      user: event.data.user.username,
      verb: event.data.verb,
      resource: resource === undefined ? "-" : subresource ? `${resource}/${subresource}` : resource,
      namespace,
      code: event.data.responseStatus?.code ?? 0,
    });
  }
  return requests;
}

/** `user verb resource code` -> count. */
export function countRequests(requests: readonly AuditRequest[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const r of requests) {
    const key = `${r.user} ${r.verb} ${r.resource} ${r.code}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return counts;
}

/** A write's kind, for the table: a pod's create, a status write, an event, or another write. */
export function writeKind(request: AuditRequest): "create" | "status" | "event" | "other" {
  if (isEventWrite(request)) return "event";
  if (request.resource.endsWith("/status")) return "status";
  return request.verb === "create" ? "create" : "other";
}

export interface WriteSummary {
  objectWrites: number;
  /** Writes by kind (writeKind), events included: a regression names itself. */
  byKind: Record<string, number>;
  conflicts: number;
  events: number;
  byVerbAndResource: Record<string, number>;
}

/**
 * A user's writes; with `namespace`, only those in it, so that what the user does elsewhere at the
 * same time (finalizers of another measurement's namespace being deleted) is not counted.
 */
export function summarizeWrites(
  requests: readonly AuditRequest[],
  user: string,
  namespace?: string,
): WriteSummary {
  const mine = requests.filter(
    (r) => r.user === user && (namespace === undefined || r.namespace === namespace),
  );
  const byVerbAndResource: Record<string, number> = {};
  for (const r of mine.filter(isWrite)) {
    const key = `${r.verb} ${r.resource}${r.code >= 400 ? ` ${r.code}` : ""}`;
    byVerbAndResource[key] = (byVerbAndResource[key] ?? 0) + 1;
  }
  const byKind: Record<string, number> = {};
  for (const r of mine.filter(isWrite)) byKind[writeKind(r)] = (byKind[writeKind(r)] ?? 0) + 1;
  return {
    objectWrites: mine.filter((r) => isWrite(r) && !isEventWrite(r)).length,
    byKind,
    conflicts: mine.filter((r) => r.code === 409).length,
    events: mine.filter(isEventWrite).length,
    byVerbAndResource,
  };
}

/** Reads a growing log from a byte offset: mark() where a measurement starts, since() after it. */
export class AuditLog {
  private readonly file: string;
  constructor(file: string) {
    this.file = file;
  }

  mark(): number {
    try {
      return statSync(this.file).size;
    } catch {
      return 0;
    }
  }

  since(offset: number): AuditRequest[] {
    const end = this.mark();
    if (end <= offset) return [];
    const buffer = Buffer.alloc(end - offset);
    const fd = openSync(this.file, "r");
    try {
      readSync(fd, buffer, 0, buffer.length, offset);
    } finally {
      closeSync(fd);
    }
    // Only whole lines: the last one may still be in the writing.
    const text = buffer.toString("utf8");
    return parseAuditLines(text.slice(0, text.lastIndexOf("\n") + 1));
  }
}
