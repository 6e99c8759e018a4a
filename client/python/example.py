#!/usr/bin/python3
"""Opens a nielsd session, generates with a fixed seed through the raw Generate request, and prints
the tokens as they stream in. Exits 0 on success, 1 on a daemon error, 2 when nielsd is unreachable.
Needs the nielsd_client package: installed by `cmake --install`, or PYTHONPATH=build/client/python.

    /usr/bin/python3 client/python/example.py --socket /run/user/1000/nielsd/nielsd.sock
"""

import argparse
import sys

import nielsd_client


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", help="nielsd socket (default: as niels-chat resolves it)")
    parser.add_argument("--prompt", default="how do i start nielsd?")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    try:
        client = nielsd_client.Client(args.socket)
    except ConnectionError as e:
        print("example.py: %s; start it with `nielsd &`" % e, file=sys.stderr)
        return 2
    with client:
        try:
            info = client.info()
            print("model %s (V=%d T=%d), daemon %s" % (info.model_name, info.vocab_size, info.context,
                                                       info.daemon_version))
            session = client.create_session()  # no system message: the raw form builds its own
            sid = session.session_id
            try:
                # The token-native chat template, by hand: [role] + text + [eot] per message, then [asst].
                ids = [info.sys_id] + list(client.tokenize(info.default_system_prompt).ids) + [info.eot_id]
                ids += [info.usr_id] + list(client.tokenize(args.prompt).ids) + [info.eot_id, info.asst_id]

                def on_token(event):
                    print("token %3d  id=%-6d %r" % (event.index, event.id, event.text), flush=True)

                result = client.generate(sid, input_ids=ids, on_token=on_token,
                                         max_new_tokens=args.max_new_tokens, seed=args.seed,
                                         want_logprobs=True)
                reply_ids = [i for i in result.new_ids if i != info.eot_id]
                print("stop=%s new_tokens=%d session_length=%d prefilled=%d" % (
                    nielsd_client.pb.StopReason.Name(result.stop_reason), len(result.new_ids),
                    result.session_length, result.stats.prefilled_tokens))
                print("reply: %s" % client.detokenize(reply_ids).text)
            finally:
                client.delete_session(sid)
        except nielsd_client.NielsdError as e:
            print("example.py: nielsd error %s" % e, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
