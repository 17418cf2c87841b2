"""The probe's input files read row by row: prompts, lexicons and rewards scored elsewhere, each
bad row refused naming the file and its row (the header is row 1)."""

import pytest

from socialrm_jax.base.errors import InputError
from socialrm_jax.sources import lexicons


def _file(tmp_path, text, name="f.csv"):
  path = tmp_path / name
  path.write_text(text)
  return path


def test_prompts_and_lexicons_are_read_in_file_order(tmp_path):
  prompts = lexicons.read_prompts(_file(tmp_path, "id,text,framing\nb,\"Best, in a word?\","
                                        "positive\nw,Worst?,negative\n"))
  assert prompts == [lexicons.Prompt("b", "Best, in a word?", "positive"),
                     lexicons.Prompt("w", "Worst?", "negative")]
  lexicon = lexicons.read_lexicon(_file(tmp_path, "category,word,contrast\ncommunion,warm,agency\n"
                                        "agency,able,\ncommunion,kind,\nagency,kind,\n",
                                        "bigtwo.csv"))
  assert lexicon == lexicons.Lexicon("bigtwo", {"communion": ["kind", "warm"],
                                                "agency": ["able", "kind"]},
                                     (("communion", "agency"),))


@pytest.mark.parametrize("text,message", [
    ("id,prompt,framing\n", r"row 1: the header must be id,text,framing; got id,prompt,framing"),
    ("id,text,framing\na b,Best?,positive\n", r"row 2: id 'a b' must be letters"),
    ("id,text,framing\na,Best?,positive\na,Worst?,negative\n", r"row 3: id 'a' is given twice"),
    ("id,text,framing\na,Best?,\n", r"row 2: the framing is empty"),
    ("id,text,framing\na,Best?\n", r"row 2: 2 fields where the header has 3"),
    ("id,text,framing\n", r"no prompts")])
def test_a_malformed_prompts_file_is_refused_naming_its_row(tmp_path, text, message):
  with pytest.raises(InputError, match=r"f\.csv, " * message.startswith("row") + message):
    lexicons.read_prompts(_file(tmp_path, text))


@pytest.mark.parametrize("text,message", [
    ("word,category,pair\n", r"row 1: the header must be word,category \(and optionally "
                             r"contrast\)"),
    ("word,category\ngolden rule,care\n", r"row 2: 'golden rule' is not one word"),
    ("word,category\nkind,care\nkind,care\n", r"row 3: 'kind' is listed twice under 'care'"),
    ("word,category\n,care\n", r"row 2: the word is empty"),
    ("word,category,contrast\nkind,care,care\n", r"row 2: category 'care' is contrasted with "
                                                 r"itself"),
    ("word,category,contrast\nkind,care,harm\nwarm,care,vice\nbad,harm,\n",
     r"row 3: category 'care' is contrasted with 'vice' here and with 'harm' in row 2"),
    ("word,category,contrast\nkind,care,harm\n", r"row 2: contrast 'harm' is no category")])
def test_a_malformed_lexicon_is_refused_naming_its_row(tmp_path, text, message):
  with pytest.raises(InputError, match=r"f\.csv, " + message):
    lexicons.read_lexicon(_file(tmp_path, text))


def test_reward_tables_long_and_in_the_study_layout(tmp_path):
  long = _file(tmp_path, "model,family,prompt,word,reward\nm,g,p,kind,1.5\nm,g,q,kind,-2\n")
  assert lexicons.is_long_table(long)
  assert lexicons.read_long_rewards(long) == {"m": ("g", {("p", "kind"): 1.5,
                                                          ("q", "kind"): -2.0})}
  study = _file(tmp_path, "word,p,q\nkind,1.5,-2\nable,0,3\n", "m.csv")
  assert not lexicons.is_long_table(study)
  assert lexicons.read_study_rewards(study) == {("p", "kind"): 1.5, ("q", "kind"): -2.0,
                                                ("p", "able"): 0.0, ("q", "able"): 3.0}
  for text, message in (("model,family,prompt,word,reward\nm,g,p,kind,x\n",
                         r"f\.csv, row 2: reward: 'x' is not a number"),
                        ("model,family,prompt,word,reward\nm,g,p,kind,1\nm,h,q,kind,1\n",
                         r"f\.csv, row 3: model 'm' has family 'h' here and 'g' before"),
                        ("model,family,prompt,word,reward\nm,g,p,kind,nan\n",
                         r"f\.csv, row 2: reward: 'nan' is not finite")):
    with pytest.raises(InputError, match=message):
      lexicons.read_long_rewards(_file(tmp_path, text))
  with pytest.raises(InputError, match=r"m\.csv, row 3: word 'kind' is empty or given twice"):
    lexicons.read_study_rewards(_file(tmp_path, "word,p\nkind,1\nkind,2\n", "m.csv"))
  with pytest.raises(InputError, match=r"m\.csv, row 2: column q: '' is not a number"):
    lexicons.read_study_rewards(_file(tmp_path, "word,p,q\nkind,1,\n", "m.csv"))
