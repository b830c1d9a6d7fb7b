// One HTTP PUT of bytes already in memory, for the runner's log upload (log-upload.ts), through
// node:http and node:https rather than fetch: fetch copies a body it is handed (twice, into a
// web stream), and at some 30 MiB/s of log each copy is fresh memory the garbage collector then
// chases; here the body goes to the socket as it is. One keep-alive socket per store is reused
// from PUT to PUT, as the uploader PUTs one at a time.
import http from "node:http";
import https from "node:https";

export interface PutAnswer {
  status: number;
  /** The answer's body, its first `BODY_MAX_BYTES` bytes (an S3 error's XML names its code). */
  text: string;
}

/** A PUT of `body` to `url`; rejects on a network error or once `signal` aborts. */
export type PutBytes = (
  url: string,
  body: Uint8Array | string,
  contentType: string,
  signal: AbortSignal,
) => Promise<PutAnswer>;

const BODY_MAX_BYTES = 1024;
const agents = { http: new http.Agent({ keepAlive: true }), https: new https.Agent({ keepAlive: true }) };

export const putBytes: PutBytes = (url, body, contentType, signal) =>
  new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(abortError(signal));
      return;
    }
    const target = new URL(url);
    const secure = target.protocol === "https:";
    if (!secure && target.protocol !== "http:") {
      reject(new Error(`${target.protocol} is not http: or https:`));
      return;
    }
    const length = typeof body === "string" ? Buffer.byteLength(body) : body.byteLength;
    const request = (secure ? https : http).request(
      target,
      {
        method: "PUT",
        agent: secure ? agents.https : agents.http,
        headers: { "content-type": contentType, "content-length": length },
        signal,
      },
      (response) => {
        const kept: Buffer[] = [];
        let keptBytes = 0;
        response.on("data", (chunk: Buffer) => {
          if (keptBytes >= BODY_MAX_BYTES) return;
          kept.push(chunk.subarray(0, BODY_MAX_BYTES - keptBytes));
          keptBytes += Math.min(chunk.length, BODY_MAX_BYTES - keptBytes);
        });
        response.on("end", () =>
          resolve({ status: response.statusCode ?? 0, text: Buffer.concat(kept).toString("utf8") }),
        );
        response.on("error", reject);
      },
    );
    request.on("error", (error) => reject(signal.aborted ? abortError(signal) : error));
    request.end(body);
  });

function abortError(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason));
}
