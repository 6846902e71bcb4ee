// A Worker that hashes a model file's chunks as its pieces arrive, so that the sha256
// check ends with the download instead of after it (WebCrypto hashes only whole buffers,
// on the calling thread); started from a Blob by LanguageModel.load and from vendor/ by
// the chat page.
//
// page → worker: {chunkBytes}, then {piece} (Uint8Array) for every piece in order, then {end: true}
// worker → page: {index, sha256} per chunk, and {hashed} (how many) after the end
let chunk, filled = 0, index = 0;
const hex = (digest) => Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
// digest copies its input before it returns, so the chunk's buffer can be refilled at once.
const hashChunk = (bytes) => {
  const at = index++;
  filled = 0;
  crypto.subtle.digest("SHA-256", bytes).then((digest) => postMessage({ index: at, sha256: hex(digest) }));
};
onmessage = ({ data: message }) => {
  if (message.chunkBytes) {
    chunk = new Uint8Array(message.chunkBytes);
  } else if (message.end) {
    if (filled) hashChunk(chunk.subarray(0, filled)); // the last chunk, shorter than the others
    postMessage({ hashed: index });
  } else {
    let piece = message.piece;
    while (piece.length) {
      const take = Math.min(piece.length, chunk.length - filled);
      chunk.set(piece.subarray(0, take), filled);
      filled += take;
      piece = piece.subarray(take);
      if (filled === chunk.length) hashChunk(chunk);
    }
  }
};
