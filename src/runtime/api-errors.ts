// The few facts about a failed API call that the controller decides on (not found, conflict,
// gone) and the one-line account of it that logs and status messages carry.
import { z } from "zod";
import { ApiError } from "./api-client.js";

/**
 * The HTTP status the API server answered a failed call with: ApiError's numeric `code` (a
 * network error's `code` is a string such as ECONNREFUSED).
 */
export function statusCodeOf(error: unknown): number | undefined {
  const code = error && typeof error === "object" ? (error as { code?: unknown }).code : undefined;
  return typeof code === "number" ? code : undefined;
}

export const isNotFound = (error: unknown) => statusCodeOf(error) === 404;
export const isConflict = (error: unknown) => statusCodeOf(error) === 409;

const StatusMessageSchema = z.looseObject({ message: z.string().min(1) });

/**
 * A one-line account of a failure for logs and status messages: the status code and the Status
 * message when the API server sent one, otherwise the first line of the error's message.
 */
export function apiErrorMessage(error: unknown): string {
  if (error instanceof ApiError) {
    const status = StatusMessageSchema.safeParse(error.body);
    if (status.success) return `${error.code} ${status.data.message}`;
  }
  return error instanceof Error ? (error.message.split("\n")[0] ?? error.name) : String(error);
}

export function isGone(error: unknown): boolean {
  return statusCodeOf(error) === 410;
}

const NETWORK_FAILURE =
  /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN|EPIPE|socket hang up/;

/** An API call's failure in words, saying when the API server could not be reached at all. */
export function describeApiFailure(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  const text = apiErrorMessage(error);
  const cause = (error as { cause?: unknown } | null)?.cause;
  const causeText = cause === undefined ? "" : apiErrorMessage(cause);
  if (
    (typeof code === "string" && NETWORK_FAILURE.test(code)) ||
    NETWORK_FAILURE.test(text) ||
    NETWORK_FAILURE.test(causeText)
  ) {
    return `API server unreachable: ${causeText && !text.includes(causeText) ? `${text}: ${causeText}` : text}`;
  }
  return text;
}
