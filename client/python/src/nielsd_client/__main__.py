"""python3 -m nielsd_client chat: a small terminal chat with nielsd (streams replies).

--json-schema FILE, --grammar FILE or --json: every reply follows that constraint (structured
output; a reply cut by --max-new-tokens before it is complete is reported on stderr, exit code 1).
In a terminal: prompt "> " (with the readline module's line editing when present), /exit or Ctrl-D
to quit, Ctrl-C during a reply cancels it. With stdin not a terminal: one reply per input line.
A reasoning model's reasoning is printed before the answer, dimmed when stdout is a terminal (and
NO_COLOR is unset), else between <think> lines; --hide-reasoning leaves it out, as niels-chat does.
Exit codes: 0 ok, 1 a daemon error, 2 nielsd unreachable.
"""

import argparse
import os
import signal
import sys

from . import nielsd_pb2 as pb
from .client import Client, NielsdError, any_json, gbnf, json_schema


class _ReplyPrinter:
    """Streams one reply: its reasoning (dimmed, tagged or hidden), then its answer."""

    def __init__(self, display):
        self.display = display  # "dim", "tagged" or "hide"
        self.in_reasoning = False

    def on_token(self, event):
        if event.reasoning and self.display != "hide":
            if not self.in_reasoning:
                print("\x1b[2m" if self.display == "dim" else "<think>\n", end="")
                self.in_reasoning = True
            print(event.reasoning, end="")
        if event.text:
            self.close(blank_line=True)
            print(event.text, end="")
        sys.stdout.flush()

    def close(self, blank_line=False):
        if self.in_reasoning:
            end = "\x1b[22m" if self.display == "dim" else "\n</think>"
            print(end + ("\n\n" if blank_line else ""), end="")
            self.in_reasoning = False


def _reasoning_display(args):
    if args.hide_reasoning:
        return "hide"
    return "dim" if sys.stdout.isatty() and not os.environ.get("NO_COLOR") else "tagged"


def _chat(args):
    try:
        client = Client(args.socket)
    except ConnectionError as e:
        print("nielsd_client: %s; start it with `nielsd &`" % e, file=sys.stderr)
        return 2
    interactive = sys.stdin.isatty()
    if interactive:
        try:
            import readline  # noqa: F401  (line editing for input())
        except ImportError:
            pass
    constraint = None
    try:
        if args.json_schema:
            with open(args.json_schema, encoding="utf-8") as f:
                constraint = json_schema(f.read())
        elif args.grammar:
            with open(args.grammar, encoding="utf-8") as f:
                constraint = gbnf(f.read())
        elif args.json:
            constraint = any_json()
    except (OSError, UnicodeDecodeError) as e:
        print("nielsd_client: cannot read %s: %s" % (args.json_schema or args.grammar, e), file=sys.stderr)
        client.close()
        return 1
    sampling = {"seed": args.seed, "temperature": 0.0 if args.greedy else args.temperature}
    sampling = {name: value for name, value in sampling.items() if value is not None}
    with client:
        try:
            session = client.create_session(args.system)
        except NielsdError as e:
            print("nielsd_client: cannot create a session: %s" % e, file=sys.stderr)
            return 1
        in_reply = [False]

        def on_sigint(signum, frame):
            if in_reply[0]:
                client.request_cancel()
            else:
                raise KeyboardInterrupt

        signal.signal(signal.SIGINT, on_sigint)
        failed = False
        try:
            while True:
                try:
                    line = input("> ") if interactive else sys.stdin.readline()
                except EOFError:
                    break
                if not interactive and line == "":
                    break
                line = line.rstrip("\r\n")
                if not line:
                    continue
                if line == "/exit":
                    break
                in_reply[0] = True
                printer = _ReplyPrinter(_reasoning_display(args))
                try:
                    reply = client.chat(session.session_id, line, max_new_tokens=args.max_new_tokens,
                                        enable_thinking=args.think, constraint=constraint,
                                        on_token=printer.on_token, **sampling)
                    printer.close()
                    print(flush=True)
                    if reply.stop_reason == pb.CONSTRAINT_INCOMPLETE:
                        print("nielsd_client: the reply was cut by --max-new-tokens before it was "
                              "complete: it does not follow the constraint", file=sys.stderr)
                        failed = True
                except NielsdError as e:
                    printer.close()
                    print(flush=True)
                    print("nielsd_client: %s" % e, file=sys.stderr)
                    failed = failed or e.code != "CANCELLED" or not interactive
                finally:
                    in_reply[0] = False
        except KeyboardInterrupt:
            print()
        finally:
            try:
                client.delete_session(session.session_id)
            except (NielsdError, ConnectionError, OSError):
                pass
    return 1 if failed else 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m nielsd_client")
    commands = parser.add_subparsers(dest="command", required=True)
    chat = commands.add_parser("chat", help="chat with the model nielsd serves")
    chat.add_argument("--socket", help="nielsd socket (default: as niels-chat resolves it)")
    chat.add_argument("--system", help="system prompt (default: none)")
    # Unset flags stay unset in the request: nielsd applies its defaults (Info.default_sampling,
    # Info.default_max_new_tokens; 256 tokens, temperature 0.9, seed 42).
    chat.add_argument("--max-new-tokens", type=int, default=None)
    chat.add_argument("--temperature", type=float, default=None)
    chat.add_argument("--seed", type=int, default=None)
    chat.add_argument("--greedy", action="store_true", help="temperature 0")
    chat.add_argument("--hide-reasoning", action="store_true",
                      help="do not print a reasoning model's reasoning, only its answer")
    think = chat.add_mutually_exclusive_group()
    think.add_argument("--think", dest="think", action="store_const", const=True, default=None,
                       help="ask the model to reason first (the chat template's enable_thinking)")
    think.add_argument("--no-think", dest="think", action="store_const", const=False,
                       help="ask the model to answer without reasoning")
    constrained = chat.add_mutually_exclusive_group()
    constrained.add_argument("--json-schema", metavar="FILE",
                             help="every reply is JSON valid under the JSON Schema in FILE")
    constrained.add_argument("--grammar", metavar="FILE",
                             help="every reply follows the GBNF grammar in FILE (llama.cpp syntax)")
    constrained.add_argument("--json", action="store_true", help="every reply is a JSON value")
    args = parser.parse_args(argv)
    return _chat(args)


if __name__ == "__main__":
    sys.exit(main())
