// Makes one Messages call with the official Anthropic Node SDK, as it
// retries out of the box but for maxRetries, and counts its attempts.
// Prints one JSON line: {attempts, status}.
// Usage: node spendcap.mjs <baseURL> <key> <model> <maxRetries>
import Anthropic from '@anthropic-ai/sdk';

const [base, key, model, maxRetries] = process.argv.slice(2);
let attempts = 0;
const counting = async (url, init) => {
  attempts++;
  return fetch(url, init);
};
const c = new Anthropic({ baseURL: base, apiKey: key, maxRetries: Number(maxRetries), fetch: counting });
let status = 200;
try {
  await c.messages.create({ model, max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });
} catch (err) {
  status = err.status ?? 0;
}
console.log(JSON.stringify({ attempts, status }));
