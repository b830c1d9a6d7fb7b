// The cluster commands' flags, checked at the edge: what commander hands over, typed, or a
// UsageError-like message naming the flag (exit code 2, nothing asked of the cluster).
import { z } from "zod";
import { DurationError, parseDuration } from "../../api/duration.js";

const Output = z
  .enum(["json", "yaml"], { error: (issue) => `-o ${String(issue.input)}: must be json or yaml` })
  .optional();

const ConnectionFlags = {
  kubeconfig: z.string().min(1, "--kubeconfig: must name a file").optional(),
  context: z.string().min(1, "--context: must name a context").optional(),
  namespace: z.string().min(1, "-n: must name a namespace").optional(),
};

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** A Kubernetes object name, as the API server checks it (a DNS-1123 subdomain). */
const PlaybookName = z
  .string({ error: "NAME is required" })
  .min(1, "NAME is required")
  .max(253, "NAME must be at most 253 characters")
  .regex(DNS_SUBDOMAIN, {
    error: (issue) =>
      `NAME ${JSON.stringify(issue.input)}: not a Playbook name (lower case letters, digits, '-', '.')`,
  });

/** --timeout as a Go duration ("10m", "1h30m"); "0s" or absent: no timeout. */
const Timeout = z
  .string()
  .optional()
  .transform((text, context) => {
    if (text === undefined) return undefined;
    try {
      const ms = parseDuration(text);
      return ms === 0 ? undefined : ms;
    } catch (error) {
      context.addIssue({
        code: "custom",
        message: `--timeout ${error instanceof DurationError ? error.message : text}`,
      });
      return z.NEVER;
    }
  });

export const SubmitFlags = z.strictObject({
  ...ConnectionFlags,
  filename: z.string({ error: "-f FILE is required" }).min(1, "-f FILE is required"),
  watch: z.boolean().optional(),
  cancelOnInterrupt: z.boolean().optional(),
  output: Output,
});
export type SubmitFlags = z.infer<typeof SubmitFlags>;

export const WaitFlags = z.strictObject({
  ...ConnectionFlags,
  name: PlaybookName,
  timeout: Timeout,
  output: Output,
});
export type WaitFlags = z.infer<typeof WaitFlags>;

export const CancelFlags = z.strictObject({
  ...ConnectionFlags,
  name: PlaybookName,
  wait: z.boolean().optional(),
  timeout: Timeout,
  output: Output,
});
export type CancelFlags = z.infer<typeof CancelFlags>;

/** A CronPlaybook's name, checked as the API server checks it. */
export const CronTriggerFlags = z.strictObject({
  ...ConnectionFlags,
  name: z
    .string({ error: "NAME is required" })
    .min(1, { error: "NAME is required", abort: true })
    .max(253, "NAME must be at most 253 characters")
    .regex(DNS_SUBDOMAIN, {
      error: (issue) =>
        `NAME ${JSON.stringify(issue.input)}: not a CronPlaybook name (lower case letters, digits, '-', '.')`,
    }),
  timeout: Timeout,
});
export type CronTriggerFlags = z.infer<typeof CronTriggerFlags>;

export const LogsFlags = z.strictObject({
  ...ConnectionFlags,
  name: PlaybookName,
  follow: z.boolean().optional(),
  task: z.string().min(1, "--task: must name a task").optional(),
  attempt: z.coerce
    .number({ error: "--attempt: must be a whole number from 1" })
    .int("--attempt: must be a whole number from 1")
    .min(1, "--attempt: must be a whole number from 1")
    .optional(),
});
export type LogsFlags = z.infer<typeof LogsFlags>;

export const DescribeFlags = z.strictObject({
  ...ConnectionFlags,
  name: PlaybookName,
});
export type DescribeFlags = z.infer<typeof DescribeFlags>;

/** Flags whose problems read as one line each: "--timeout "x" is not a duration ...". */
export function parseFlags<T extends z.ZodType>(schema: T, flags: unknown): z.infer<T> {
  const parsed = schema.safeParse(flags);
  if (parsed.success) return parsed.data;
  throw new FlagError(parsed.error.issues.map((issue) => issue.message).join("; "));
}

export class FlagError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "FlagError";
  }
}
