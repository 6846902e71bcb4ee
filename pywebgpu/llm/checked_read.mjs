// Reads a model file's response body into one ArrayBuffer of the manifest's size and
// checks the manifest's chunk sha256s as the pieces come, so that the check ends with the
// download: each piece, once copied into the buffer, goes (transferred where it owns its
// whole buffer) to a Worker running chunk_hasher.js from `hasherUrl`, and a damaged chunk
// stops the download. One module for both downloads: LanguageModel.load's (from a Blob)
// and the chat page's (from vendor/).
//
// Returns {data, verified, damagedChunk, tooLarge}:
// - data: an ArrayBuffer of the bytes read (shorter than expectedSize where the body was);
// - verified: every chunk's sha256 matched, so the whole file's needs no checking;
// - damagedChunk: the index of the first chunk whose sha256 did not match (-1: none);
//   the read stopped there;
// - tooLarge: the body is longer than expectedSize; the read stopped there.
// Not verified and no damaged chunk: the caller checks the whole file's sha256 (no chunk
// sha256s, no Worker here, or a hasher that failed to start).
// onProgress(received, expectedSize) comes once `progressStep` more bytes have come (by
// default a hundredth of the size: each report crosses into Python there) and at the end.
// A body whose stream fails is rethrown as it is, unless `resume(received, error)` gives
// the response to go on with: a 206 (Partial Content) continues after the `received`
// bytes, anything else is the whole file again and the read starts over; resume throws to
// give up.
export async function readModelBody(
  response, expectedSize,
  { onProgress = null, progressStep = expectedSize / 100, chunkBytes = 0, chunkSha256 = null, hasherUrl = null, resume = null } = {},
) {
  let reader = response.body.getReader();
  const data = new Uint8Array(expectedSize);
  const newHasher = () => (chunkSha256 && hasherUrl ? startHasher(hasherUrl, chunkSha256, Math.min(chunkBytes, expectedSize)) : null);
  let hasher = newHasher();
  const result = { data: null, verified: false, damagedChunk: -1, tooLarge: false };
  let received = 0, reported = 0;
  try {
    for (;;) {
      let piece;
      try {
        piece = await reader.read();
      } catch (error) {
        if (!resume) throw error;
        const next = await resume(received, error);
        reader = next.body.getReader();
        if (next.status !== 206) {
          hasher?.close();
          hasher = newHasher();
          received = reported = 0;
          onProgress?.(0, expectedSize);
        }
        continue;
      }
      const { done, value } = piece;
      if (done) break;
      if (received + value.length > expectedSize) {
        await reader.cancel();
        result.tooLarge = true;
        return result;
      }
      data.set(value, received);
      received += value.length;
      hasher?.add(value);
      if (hasher?.damaged >= 0) {
        await reader.cancel();
        result.damagedChunk = hasher.damaged;
        return result;
      }
      if (onProgress && received - reported >= progressStep) {
        reported = received;
        onProgress(received, expectedSize);
      }
    }
    if (onProgress && reported !== received) onProgress(received, expectedSize);
    if (received < expectedSize) {
      result.data = data.buffer.slice(0, received);
      return result;
    }
    result.data = data.buffer;
    const verdict = hasher ? await hasher.finish() : false;
    if (verdict === true) result.verified = true;
    else if (verdict !== false) result.damagedChunk = verdict;
    return result;
  } finally {
    hasher?.close();
  }
}

// The Worker hashing the chunks: `verdict` gives true (every chunk matched), false (the
// Worker failed: check the whole) or the index of a damaged chunk, which `damaged` also
// holds as soon as it is known. null where no Worker can start (e.g. a content security
// policy).
function startHasher(url, expected, chunkBytes) {
  let worker;
  try {
    worker = new Worker(url);
  } catch (error) {
    console.warn(`The model file is checked after its download: no Worker to hash it on the way (${error.message}).`);
    return null;
  }
  const hasher = { damaged: -1 };
  let matched = 0, results = 0, hashed = -1;
  hasher.verdict = new Promise((settle) => {
    worker.onmessage = ({ data: message }) => {
      if (message.hashed !== undefined) {
        hashed = message.hashed;
      } else {
        results++;
        if (message.sha256 === expected[message.index]) matched++;
        else if (hasher.damaged < 0) settle((hasher.damaged = message.index));
      }
      if (hasher.damaged < 0 && results === hashed) settle(hashed === expected.length && matched === hashed);
    };
    worker.onerror = () => settle(false);
  });
  worker.postMessage({ chunkBytes });
  hasher.add = (piece) => {
    const whole = piece.byteOffset === 0 && piece.byteLength === piece.buffer.byteLength;
    worker.postMessage({ piece: whole ? piece : piece.slice() }, whole ? [piece.buffer] : []);
  };
  hasher.finish = () => {
    worker.postMessage({ end: true });
    return hasher.verdict;
  };
  hasher.close = () => worker.terminate();
  return hasher;
}
