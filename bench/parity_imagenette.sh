#!/bin/sh
# Training parity with torchvision's new recipe: ResNet-18 trained on
# Imagenette (train/ and val/ ImageFolders) by examples/reference/train.py, fed by
# stoker and by torchvision's DataLoader, two seeds each, the same model,
# optimiser, schedule and recipe; one JSON line per run (top-1 on val/ after
# the last epoch, images/s) in OUT, and the means at the end.
#
#   [SEEDS="0 1"] [LOADERS="stoker torchvision"] [CACHE=PATH] [RECIPE=new|classic] \
#     bench/parity_imagenette.sh IMAGENETTE [EPOCHS=16] [OUT=runs/parity.jsonl]
#
# CACHE: stoker trains from a pre-decoded cache of IMAGENETTE/train at PATH
# (packed on first use, --cache); RECIPE=classic: RandomResizedCrop(224),
# flip, normalise, eval Resize(256) + CenterCrop(224), no label smoothing.
#
# The recipe: RandomResizedCrop(176) + flip + TrivialAugmentWide + normalise +
# RandomErasing(0.1), RandomChoice(MixUp(0.2), CutMix(1.0)) per batch, label
# smoothing 0.1; eval Resize(232) + CenterCrop(224); the learning rate 0.1,
# 2 epochs of linear warm-up, then cosine to 0 (so that the last epoch's
# top-1 is a converged one, not a point on a still-rising curve). RASampler is left out:
# with repetitions 4 an epoch holds a quarter of the distinct images, too few
# for 16 epochs of a 9,469-image set (its order is tested against
# torchvision's sampler in python/tests/test_augment.py).
set -eu
root=${1:?usage: bench/parity_imagenette.sh IMAGENETTE [EPOCHS] [OUT]}
epochs=${2:-16}
out=${3:-runs/parity.jsonl}
py=${PYTHON:-python3}
mkdir -p "$(dirname "$out")"
: >"$out"
new="--auto-augment ta_wide --random-erase 0.1 --mixup-alpha 0.2 --cutmix-alpha 1.0
  --label-smoothing 0.1 --train-crop-size 176 --val-resize-size 232 --val-crop-size 224
  --lr-scheduler cosine --lr-warmup-epochs 2"
classic="--train-crop-size 224 --val-resize-size 256 --val-crop-size 224 --lr-scheduler cosine
  --lr-warmup-epochs 2"
case ${RECIPE:-new} in
  new) recipe=$new ;;
  classic) recipe=$classic ;;
  *) echo "RECIPE must be new or classic" >&2; exit 2 ;;
esac
for loader in ${LOADERS:-stoker torchvision}; do
  for seed in ${SEEDS:-0 1}; do
    workers=14
    extra=""
    [ "$loader" = torchvision ] && workers=16
    [ "$loader" = stoker ] && [ -n "${CACHE:-}" ] && extra="--cache $CACHE"
    # shellcheck disable=SC2086
    PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH} "$py" examples/reference/train.py "$root" --loader "$loader" \
      -a resnet18 --num-classes 10 -b 256 --epochs "$epochs" --seed "$seed" --workers "$workers" \
      --amp --channels-last --print-freq 1000 --json $recipe $extra | tail -1 |
      "$py" -c "import json,sys; d=json.loads(sys.stdin.read()); d['seed']=$seed; d['source']='${extra:+cache}' or 'jpeg'; d['recipe_name']='${RECIPE:-new}'; print(json.dumps(d))" \
      >>"$out"
    tail -1 "$out" | "$py" -c "import json,sys; d=json.load(sys.stdin); print(d['loader'], d['source'], d['recipe_name'], 'seed', d['seed'], 'top-1', d['val_acc1'], 'images/s', d['images_per_s'], flush=True)"
  done
done
"$py" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for name in ("stoker", "torchvision"):
    acc = [r["val_acc1"] for r in rows if r["loader"] == name]
    ips = [r["images_per_s"] for r in rows if r["loader"] == name]
    if not acc:
        continue
    print(f"{name}: top-1 {acc} mean {sum(acc) / len(acc):.2f}; images/s {ips}")
PY
