// The official openai SDK's OpenAIRealtimeWS (with the ws package) against
// Sluice's GET /v1/realtime: gateway/npmclients_realtime_test.go runs one
// scenario and reads one JSON line per thing that happened.
//
//   node realtime.mjs BASE KEY MODEL SCENARIO [SESSION]
//
// Scenarios: basic (update the session, create an item and a response,
// read response.done), throttled (a response.create refused with an error
// event is sent again after its retry_after_ms), ceiling (responses until
// the server closes), wait (connect and wait for the server's close), drop
// (the provider drops the connection mid-response).
// Every close is classified by the seed's close handler (reference 001).
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';

const [base, key, model, scenario, session] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + '/v1', apiKey: key });
const headers = session ? { 'X-Sluice-Session': session } : {};
// The SDK always dials wss: the test's gateway has a self-signed certificate.
const rt = new OpenAIRealtimeWS({ model, options: { headers, rejectUnauthorized: false } }, client);
const out = (o) => console.log(JSON.stringify(o));

// The seed's close handler, in behaviour: 1011 with the quota words is
// terminal; any other close but 1000 reconnects, 2, 4, 8 s, 3 attempts.
function classify(code, reason) {
  const r = (reason || '').toLowerCase();
  const isQuotaError = code === 1011 && (r.includes('quota') || r.includes('exceeded') || r.includes('resource_exhausted'));
  if (isQuotaError) return { terminal: true, reconnect: false };
  return { terminal: false, reconnect: code !== 1000, backoff_ms: [2000, 4000, 8000] };
}

rt.socket.on('close', (code, reason) => {
  out({ event: 'close', code, reason: reason.toString(), ...classify(code, reason.toString()) });
  process.exit(0);
});
rt.on('error', (err) => {
  const e = err.error || {};
  out({ event: 'error', code: e.code, message: e.message, retry_after_ms: e.retry_after_ms, rule: e.limit && e.limit.rule });
  if (scenario === 'throttled' && e.retry_after_ms) {
    setTimeout(() => rt.send({ type: 'response.create', response: { max_output_tokens: 3 } }), e.retry_after_ms);
  }
});
rt.on('response.done', (ev) => {
  const u = ev.response.usage;
  out({ event: 'response.done', input_tokens: u.input_tokens, output_tokens: u.output_tokens });
  responses++;
  if (scenario === 'basic' || (scenario === 'throttled' && responses === 2)) return rt.close();
  if (scenario === 'throttled' || scenario === 'ceiling') rt.send({ type: 'response.create', response: { max_output_tokens: 256 } });
});
let responses = 0;
rt.socket.on('open', () => {
  out({ event: 'open' });
  if (scenario === 'wait') return;
  rt.send({ type: 'session.update', session: { type: 'realtime', instructions: 'Be brief.' } });
  rt.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: scenario === 'drop' ? '[mock cut=2]' : 'Hello!' }] } });
  rt.send({ type: 'response.create', response: { max_output_tokens: scenario === 'basic' ? 16 : 256 } });
});
rt.on('session.updated', () => out({ event: 'session.updated' }));
setTimeout(() => { out({ event: 'timeout' }); process.exit(1); }, 15000);
