#!/usr/bin/python3
"""The installed nielsd_client Python package against a live nielsd: every request type, streaming,
cancelling the call in flight, errors. Run by tests/client/install_test.sh in a clean environment
(env -i, PYTHONPATH = the install prefix's dist-packages only).

    python_package_test.py --socket PATH --prefix PREFIX
"""

import argparse
import json
import math
import os
import sys
import unittest

import nielsd_client
from nielsd_client import pb

ARGS = None


class PackageTest(unittest.TestCase):
    def setUp(self):
        self.client = nielsd_client.Client(ARGS.socket)
        self.addCleanup(self.client.close)

    def test_imported_from_the_install_prefix(self):
        prefix = os.path.realpath(ARGS.prefix) + os.sep
        self.assertTrue(os.path.realpath(nielsd_client.__file__).startswith(prefix), nielsd_client.__file__)
        self.assertTrue(os.path.realpath(pb.__file__).startswith(prefix), pb.__file__)

    def test_info_tokenize_detokenize_stats(self):
        info = self.client.info()
        self.assertEqual(info.model_name, "niels-demo")
        self.assertGreater(info.vocab_size, 0)
        ids = list(self.client.tokenize("how do i start nielsd?").ids)
        self.assertTrue(ids)
        self.assertEqual(self.client.detokenize(ids).text, "how do i start nielsd?")
        self.assertGreaterEqual(self.client.stats().connections, 1)

    def test_session_lifecycle(self):
        sid = self.client.create_session("you are terse.").session_id
        self.assertEqual(len(sid), 32)
        self.assertIn(sid, [s.session_id for s in self.client.list_sessions().sessions])
        reply = self.client.chat(sid, "what is nielsd?", max_new_tokens=8, temperature=0)
        length = self.client.get_session(sid).session.length
        self.assertEqual(length, reply.session_length)
        fork = self.client.fork_session(sid).session_id
        self.assertEqual(list(self.client.get_session(fork).token_ids),
                         list(self.client.get_session(sid).token_ids))
        reset = self.client.reset_session(sid)
        self.assertLess(reset.length, length)
        self.client.delete_session(fork)
        self.client.delete_session(sid)
        with self.assertRaises(nielsd_client.NielsdError) as raised:
            self.client.get_session(sid)
        self.assertEqual(raised.exception.code, "NOT_FOUND")

    def test_deferred_prefill(self):
        # A deferred session answers at once; its first chat prefills the system prompt with the
        # turn's own ids (more prefilled than a prefilled session's turn) and replies the same.
        deferred = self.client.create_session("you are terse.", defer_prefill=True).session_id
        prefilled = self.client.create_session("you are terse.").session_id
        late = self.client.chat(deferred, "what is nielsd?", max_new_tokens=8, temperature=0)
        early = self.client.chat(prefilled, "what is nielsd?", max_new_tokens=8, temperature=0)
        self.assertEqual(late.reply, early.reply)
        self.assertEqual(late.session_length, early.session_length)
        self.assertGreater(late.stats.prefilled_tokens, early.stats.prefilled_tokens)
        self.assertEqual(list(self.client.get_session(deferred).token_ids),
                         list(self.client.get_session(prefilled).token_ids))
        self.client.delete_session(deferred)
        self.client.delete_session(prefilled)

    def test_streamed_chat_adds_up_to_the_reply(self):
        sid = self.client.create_session("you are terse.").session_id
        events = []
        reply = self.client.chat(sid, "how do i start nielsd?", on_token=events.append,
                                 max_new_tokens=16, temperature=0)
        self.assertTrue(events)
        self.assertEqual("".join(e.text for e in events), reply.reply)
        self.assertEqual("".join(e.reasoning for e in events), reply.reasoning)
        # Greedy: the same turn on a fresh session without streaming gives the same reply.
        other = self.client.create_session("you are terse.").session_id
        self.assertEqual(self.client.chat(other, "how do i start nielsd?", max_new_tokens=16,
                                          temperature=0).reply, reply.reply)
        self.client.delete_session(sid)
        self.client.delete_session(other)

    def test_stop_strings(self):
        full_sid = self.client.create_session("you are terse.").session_id
        full = self.client.chat(full_sid, "how do i start nielsd?", max_new_tokens=24, temperature=0).reply
        words = full.split()
        self.assertGreaterEqual(len(words), 3, full)
        stop = " " + words[2]                      # a word in the middle of the greedy reply
        at = full.index(stop)
        sid = self.client.create_session("you are terse.").session_id
        events = []
        reply = self.client.chat(sid, "how do i start nielsd?", on_token=events.append, max_new_tokens=24,
                                 temperature=0, stop_strings=["never in the reply", stop])
        self.assertEqual(reply.stop_reason, nielsd_client.pb.STOP_STRING)
        self.assertEqual(reply.stop_string, stop)
        self.assertEqual(reply.reply, full[:at])
        self.assertEqual("".join(e.text for e in events), reply.reply)
        with self.assertRaises(nielsd_client.NielsdError) as raised:
            self.client.chat(sid, "x", stop_strings=["s%d" % i for i in range(17)])
        self.assertEqual(raised.exception.code, "INVALID_ARGUMENT")
        self.assertIn("budget stop_strings", str(raised.exception))
        self.client.delete_session(full_sid)
        self.client.delete_session(sid)

    def test_rewind_regenerates_the_last_turn(self):
        sid = self.client.create_session("you are terse.").session_id
        self.client.chat(sid, "hello", max_new_tokens=6, temperature=0)
        second = self.client.chat(sid, "what is nielsd?", max_new_tokens=6, temperature=0)
        self.assertEqual(len(self.client.get_session(sid).messages), 5)
        rewound = self.client.rewind_session(sid, 2)
        self.assertEqual(rewound.messages, 2)
        messages = self.client.get_session(sid).messages
        self.assertEqual([m.role for m in messages], ["system", "user", "assistant"])
        again = self.client.chat(sid, "what is nielsd?", max_new_tokens=6, temperature=0)
        self.assertEqual(again.reply, second.reply)
        self.assertEqual(again.stats.reused_tokens, rewound.length)
        self.client.delete_session(sid)

    def test_messages_and_the_token_native_formats_limits(self):
        sid = self.client.create_session("you are terse.").session_id
        by_text = self.client.chat(sid, "what is nielsd?", max_new_tokens=6, temperature=0)
        other = self.client.create_session("you are terse.").session_id
        by_message = self.client.chat(other, messages=[nielsd_client.message("user", "what is nielsd?")],
                                      max_new_tokens=6, temperature=0)
        self.assertEqual(by_message.reply, by_text.reply)
        self.assertEqual(by_message.messages, 2)
        # Regenerate: keep nothing, send the same message again.
        again = self.client.chat(other, messages=[nielsd_client.message("user", "what is nielsd?")],
                                 keep_messages=0, max_new_tokens=6, temperature=0)
        self.assertEqual(again.reply, by_text.reply)
        self.assertEqual(len(self.client.get_session(other).messages), 3)  # system, user, reply
        # niels_gpt's token-native format takes tools through the generic tool format.
        self.assertEqual(self.client.info().tool_call_format, "generic_json")
        tools = nielsd_client.tools_from_openai([{"type": "function", "function": {
            "name": "get_weather", "description": "the weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])
        self.assertEqual(tools.tools[0].name, "get_weather")
        self.assertEqual(json.loads(tools.tools[0].parameters)["properties"]["city"]["type"], "string")
        with_tools = self.client.create_session("you are terse.", tools=tools).session_id
        called = self.client.chat(with_tools, "weather in oslo?", max_new_tokens=48, tool_choice="get_weather",
                                  temperature=0)
        self.assertEqual(len(called.tool_calls), 1)
        self.assertEqual(called.tool_calls[0].name, "get_weather")
        self.assertIsInstance(json.loads(called.tool_calls[0].arguments), dict)
        roles = [m.role for m in self.client.get_session(with_tools).messages]
        self.assertEqual(roles, ["system", "user", "assistant"])
        self.client.delete_session(with_tools)
        # A session that already holds token-native turns takes no tools.
        with self.assertRaises(nielsd_client.NielsdError) as raised:
            self.client.chat(other, "and now?", max_new_tokens=2, tools=[{"type": "function", "function": {
                "name": "get_weather", "parameters": {"type": "object"}}}])
        self.assertEqual(raised.exception.code, "INVALID_ARGUMENT")
        self.assertIn("tools", str(raised.exception))
        for sid_ in (sid, other):
            self.client.delete_session(sid_)

    def test_generate_with_logprobs(self):
        info = self.client.info()
        sid = self.client.create_session().session_id
        ids = [info.usr_id] + list(self.client.tokenize("hello").ids) + [info.eot_id, info.asst_id]
        result = self.client.generate(sid, input_ids=ids, max_new_tokens=4, want_logprobs=True, seed=1)
        self.assertEqual(len(result.new_ids), len(result.steps))
        self.assertEqual(result.session_length, len(ids) + len(result.new_ids))
        # The distribution each id was drawn from: top-k 3 lists at most 3 ids, the drawn one among them.
        sampled = self.client.generate(sid, input_ids=ids, max_new_tokens=4, sampled_top_logprobs=5,
                                       temperature=0.9, top_k=3, seed=1)
        self.assertEqual(len(sampled.new_ids), len(sampled.steps))
        for step in sampled.steps:
            self.assertLessEqual(len(step.sampled_top), 3)
            self.assertIn(step.id, [a.id for a in step.sampled_top])
            self.assertAlmostEqual(sum(math.exp(a.logprob) for a in step.sampled_top), 1.0, places=5)
        self.client.delete_session(sid)

    def test_logit_bias(self):
        info = self.client.info()
        ids = [info.usr_id] + list(self.client.tokenize("hello").ids) + [info.eot_id, info.asst_id]
        plain_sid = self.client.create_session().session_id
        plain = self.client.generate(plain_sid, input_ids=ids, max_new_tokens=4, temperature=0.0,
                                     stop_ids=[info.eot_id], want_logprobs=True)
        favoured = 42 if plain.new_ids[0] != 42 else 43
        # A large bias makes greedy pick the id at every step; its logprob is of the biased logits.
        sid = self.client.create_session().session_id
        biased = self.client.generate(sid, input_ids=ids, max_new_tokens=4, temperature=0.0,
                                      stop_ids=[info.eot_id], want_logprobs=True,
                                      logit_bias={favoured: 1000.0})
        self.assertEqual(list(biased.new_ids), [favoured] * 4)
        self.assertGreater(biased.steps[0].logprob, -1e-3)
        # -inf bans the greedy pick (pairs work too).
        banned_sid = self.client.create_session().session_id
        banned = self.client.generate(banned_sid, input_ids=ids, max_new_tokens=4, temperature=0.0,
                                      stop_ids=[info.eot_id], logit_bias=[(plain.new_ids[0], float("-inf"))])
        self.assertNotIn(plain.new_ids[0], list(banned.new_ids))
        with self.assertRaises(nielsd_client.NielsdError) as raised:
            self.client.generate(sid, input_ids=[5], max_new_tokens=1, logit_bias={1 << 24: 1.0})
        self.assertEqual(raised.exception.code, "INVALID_ARGUMENT")
        self.assertIn("sampling.logit_bias[0]", str(raised.exception))
        for sid_ in (plain_sid, sid, banned_sid):
            self.client.delete_session(sid_)

    def test_cancel_in_flight_keeps_the_session_and_the_connection(self):
        info = self.client.info()
        sid = self.client.create_session("you are terse.").session_id
        self.client.chat(sid, "hello", max_new_tokens=4, temperature=0)
        before = list(self.client.get_session(sid).token_ids)
        room = info.context - len(before) - 8
        seen = []

        def on_token(event):
            seen.append(event)
            self.client.request_cancel()  # as a signal handler or another thread would

        # eot banned: only max_new_tokens (far more than fit before the cancel lands) could end it.
        ids = [info.usr_id] + list(self.client.tokenize("keep talking").ids) + [info.eot_id, info.asst_id]
        with self.assertRaises(nielsd_client.NielsdError) as raised:
            self.client.generate(sid, input_ids=ids, on_token=on_token, max_new_tokens=room,
                                 temperature=0, banned_ids=[info.eot_id])
        self.assertEqual(raised.exception.code, "CANCELLED")
        self.assertLess(len(seen), room)
        self.assertEqual(list(self.client.get_session(sid).token_ids), before)
        # The connection is still in step: the next call gets its own answer.
        self.assertEqual(self.client.info().model_name, "niels-demo")
        self.assertFalse(self.client.cancel(10**9).found)  # nothing of that id in flight
        self.client.delete_session(sid)

    def test_stop_in_flight_keeps_what_was_generated(self):
        info = self.client.info()
        sid = self.client.create_session("you are terse.").session_id
        self.addCleanup(self.client.delete_session, sid)
        before = list(self.client.get_session(sid).token_ids)
        room = info.context - len(before) - 8
        seen = []

        def on_token(event):
            seen.append(event.id)
            if len(seen) == 3:
                self.client.request_stop()

        ids = [info.usr_id] + list(self.client.tokenize("keep talking").ids) + [info.eot_id, info.asst_id]
        result = self.client.generate(sid, input_ids=ids, on_token=on_token, max_new_tokens=room,
                                      temperature=0, banned_ids=[info.eot_id])
        self.assertEqual(result.stop_reason, pb.STOPPED)
        self.assertEqual(list(result.new_ids), seen)
        self.assertLess(len(seen), room)
        self.assertEqual(list(self.client.get_session(sid).token_ids), before + ids + seen)
        self.assertEqual(self.client.info().model_name, "niels-demo")

    def test_structured_output(self):
        self.assertEqual(list(self.client.info().constraint_kinds), ["json_schema", "gbnf", "any_json"])
        sid = self.client.create_session().session_id
        self.addCleanup(self.client.delete_session, sid)
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                  "additionalProperties": False}
        reply = self.client.chat(sid, "ok?", constraint=nielsd_client.json_schema(schema), max_new_tokens=60, seed=3)
        self.assertEqual(reply.stop_reason, pb.EOT)
        self.assertIn(json.loads(reply.reply), ({"ok": True}, {"ok": False}))
        reply = self.client.chat(sid, "json", constraint=nielsd_client.any_json(), max_new_tokens=60, seed=4)
        if reply.stop_reason != pb.CONSTRAINT_INCOMPLETE:
            json.loads(reply.reply)
        ids = list(self.client.tokenize("yes or no").ids)
        generated = self.client.generate(sid, ids, max_new_tokens=10, temperature=1.0, seed=5,
                                         constraint=nielsd_client.gbnf('root ::= "yes" | "no"\n'))
        self.assertEqual(generated.stop_reason, pb.EOT)
        self.assertIn(self.client.detokenize(generated.new_ids).text, ("yes", "no"))
        with self.assertRaises(nielsd_client.NielsdError) as error:
            self.client.chat(sid, "x", constraint=nielsd_client.gbnf("root ::= (\n"))
        self.assertEqual(error.exception.code, "INVALID_ARGUMENT")
        self.assertIn("constraint.gbnf: grammar line 2, column 1", error.exception.message)

    def test_weight_stats(self):
        # niels-demo is a niels_gpt model: 4 layers of down projections, a fused qkv per layer.
        info = self.client.info()
        down = self.client.weight_stats("model.layers.*.mlp.down_proj.weight", compact=True)
        self.assertEqual([t["hf_name"] for t in down],
                         ["model.layers.%d.mlp.down_proj.weight" % i for i in range(info.layers)])
        for t in down:
            self.assertEqual(t["shape"], [info.width, info.d_ff])
            self.assertEqual(t["parameters"], info.width * info.d_ff)
            self.assertLessEqual(t["min"], t["mean"])
            self.assertLessEqual(t["mean"], t["max"])
            self.assertGreater(t["std"], 0)
            self.assertNotIn("median", t)
        full = self.client.weight_stats(["blk.0.ffn_down.weight", "blocks.0.attn.qkv.weight"], compact=False)
        self.assertEqual([t["gguf_name"] for t in full], ["blocks.0.attn.qkv.weight", "blk.0.ffn_down.weight"])
        self.assertEqual(full[1]["std"], down[0]["std"])
        self.assertEqual(sum(full[1]["histogram"]["counts"]), full[1]["parameters"])
        self.assertTrue(full[1]["p5"] <= full[1]["median"] <= full[1]["p95"])
        with self.assertRaises(nielsd_client.NielsdError) as error:
            self.client.weight_stats("model.layers.99.*")
        self.assertEqual(error.exception.code, "INVALID_ARGUMENT")
        self.assertIn("weight_stats.names[0]", error.exception.message)

    def test_probes(self):
        # Activation statistics through the real daemon: every block's output per token and in
        # total; the ids and logprobs are those of the same request without probes.
        info = self.client.info()
        ids = list(self.client.tokenize("what is nielsd?").ids)
        plain = self.client.generate(self.client.create_session().session_id, ids, max_new_tokens=6,
                                     temperature=1.0, seed=3, want_logprobs=True)
        events = []
        probed = self.client.generate(self.client.create_session().session_id, ids, max_new_tokens=6,
                                      temperature=1.0, seed=3, want_logprobs=True, on_token=events.append,
                                      probes={"sites": ["blocks.*.hook_resid_post", "ln_final.hook_normalized"],
                                              "aggregate": True})
        self.assertEqual(list(probed.new_ids), list(plain.new_ids))
        self.assertEqual([s.logprob for s in probed.steps], [s.logprob for s in plain.steps])
        sites = info.layers + 1
        positions = len(ids) + len(probed.new_ids) - 1
        per_token = nielsd_client.activation_stats_dicts(probed.activations)
        self.assertEqual(len(per_token), sites * positions)
        self.assertEqual(sum(len(e.activations) for e in events), len(per_token))
        self.assertEqual(len(events[0].activations), sites * len(ids))
        for a in per_token:
            self.assertEqual(a["shape"], [info.width])
            self.assertLessEqual(a["min"], a["mean"])
            self.assertLessEqual(a["mean"], a["max"])
            self.assertNotIn("median", a)
        final = [a for a in per_token if a["site"] == "ln_final.hook_normalized"]
        for a in final:  # unit RMS before the norm's weight: l2 = sqrt(width), up to eps
            self.assertAlmostEqual(a["l2_norm"] / info.width ** 0.5, 1.0, places=3)
        totals = nielsd_client.activation_stats_dicts(probed.activation_totals)
        self.assertEqual([t["site"] for t in totals],
                         ["blocks.%d.hook_resid_post" % l for l in range(info.layers)] + ["ln_final.hook_normalized"])
        for t in totals:
            self.assertEqual(t["positions"], positions)
            self.assertEqual(t["position"], -1)
            mine = [a for a in per_token if a["site"] == t["site"]]
            self.assertAlmostEqual(t["max"], max(a["max"] for a in mine))
            self.assertAlmostEqual(t["mean"], sum(a["mean"] for a in mine) / len(mine), places=5)
        with self.assertRaises(nielsd_client.NielsdError) as error:
            self.client.generate(self.client.create_session().session_id, ids, max_new_tokens=2,
                                 probes={"sites": ["blocks.%d.hook_resid_pre" % info.layers]})
        self.assertEqual(error.exception.code, "INVALID_ARGUMENT")
        self.assertIn("probes.sites[0]: layer", error.exception.message)

    def test_unreachable_daemon(self):
        with self.assertRaises(ConnectionError):
            nielsd_client.Client(ARGS.socket + ".missing")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--prefix", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
