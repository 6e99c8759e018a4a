#include "daemon/grammar/json_grammar.h"

namespace niels::daemon::grammar {

std::string_view JsonPrimitiveRules() {
  return R"(space ::= | " " | "\n"{1,2} [ \t]{0,20}
char ::= [^"\\\x00-\x1F\x7F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))
string ::= "\"" char* "\"" space
integral-part ::= [0] | [1-9] [0-9]{0,15}
decimal-part ::= [0-9]{1,16}
number ::= "-"? integral-part ("." decimal-part)? ([eE] [-+]? integral-part)? space
integer ::= "-"? integral-part space
boolean ::= ("true" | "false") space
null ::= "null" space
value ::= object | array | string | number | boolean | null
object ::= "{" space (string ":" space value ("," space string ":" space value)*)? "}" space
array ::= "[" space (value ("," space value)*)? "]" space
)";
}

std::string AnyJsonGbnf() { return "root ::= value\n" + std::string(JsonPrimitiveRules()); }

}  // namespace niels::daemon::grammar
