"""The order view: a serializer that mirrors the trading API's order
fields (DecimalField for decimals, as a Django backend writes them), an
in-memory store of placed orders, and a record of each placement for the
test to compare with what exgate validated."""

import threading

from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

# The market catalogue, in the trading API's format (precisions are
# integers written as strings).
MARKETS = [
    # symbol, name, base, quote, tradable, price, base amount, quote amount precision
    ("BTC_USDT", "Bitcoin/Tether", "BTC", "USDT", True, 2, 6, 2),
    ("ETH_USDT", "Ethereum/Tether", "ETH", "USDT", True, 2, 4, 2),
    ("BTC_IRT", "Bitcoin/Toman", "BTC", "IRT", True, 0, 8, 0),
    ("USDT_IRT", "Tether/Toman", "USDT", "IRT", True, 0, 2, 0),
    ("ETH_BTC", "Ethereum/Bitcoin", "ETH", "BTC", True, 6, 4, 8),
    ("LUNC_USDT", "Terra Classic/Tether", "LUNC", "USDT", False, 8, 2, 4),
]

DECIMAL_FIELDS = ["base_amount", "quote_amount", "price", "stop_price", "oco_target_price"]
FIELDS = ["symbol", "type", "side"] + DECIMAL_FIELDS + ["identifier"]


def decimal_field(required):
    # 20 digits before the point and 30 after: the bounds of the API.
    return serializers.DecimalField(
        max_digits=50, decimal_places=30, required=required, allow_null=not required
    )


class OrderSerializer(serializers.Serializer):
    symbol = serializers.CharField(max_length=32)
    type = serializers.ChoiceField(choices=["limit", "market", "stop_limit", "oco"])
    side = serializers.ChoiceField(choices=["buy", "sell"])
    base_amount = decimal_field(True)
    quote_amount = decimal_field(False)
    price = decimal_field(False)
    stop_price = decimal_field(False)
    oco_target_price = decimal_field(False)
    identifier = serializers.CharField(max_length=256, required=False, allow_null=True)


_lock = threading.Lock()
_placed = []  # every placed order, in order


class OrderView(APIView):
    def post(self, request, format=None):
        raw = request._request.body  # read before DRF parses it; kept by Django
        s = OrderSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        fields = {k: (None if d.get(k) is None else str(d[k])) for k in FIELDS if k in d}
        with _lock:
            order_id = len(_placed) + 1
            _placed.append(
                {
                    "id": order_id,
                    "user": str(request.user.id),
                    "request_id": request.META.get("HTTP_X_REQUEST_ID", ""),
                    "content_type": request.META.get("CONTENT_TYPE", ""),
                    "body": raw.decode("latin-1"),
                    "fields": fields,
                }
            )
        out = {"id": order_id, "state": "active"}
        out.update({k: fields.get(k) for k in FIELDS})
        return Response(out, status=status.HTTP_201_CREATED)


class MarketsView(APIView):
    authentication_classes = []
    permission_classes = [AllowAny]

    def get(self, request, format=None):
        return Response(
            [
                {
                    "symbol": m[0],
                    "name": m[1],
                    "base": m[2],
                    "quote": m[3],
                    "tradable": m[4],
                    "price_precision": str(m[5]),
                    "base_amount_precision": str(m[6]),
                    "quote_amount_precision": str(m[7]),
                }
                for m in MARKETS
            ]
        )


class PlacedView(APIView):
    """What the test reads back: every placement, as recorded."""

    authentication_classes = []
    permission_classes = [AllowAny]

    def get(self, request, format=None):
        with _lock:
            return Response(list(_placed))
